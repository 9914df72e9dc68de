"""Issue 11 item 5 and issue 13 item 4: the dashboard listens on 127.0.0.1, saves by name under one output
root, never replaces what it did not write, and turns every bad Save path into one sentence."""
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from analysis.io import writes
from helpers.app import click, one_sentence, open_page

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only", "sweep_cache")


def test_dashboard_binds_localhost_by_default_and_docker_exposes_it_deliberately():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    run = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True)
    assert re.search(r"-m ui.shared.launch .*--server.address 127.0.0.1", run.stdout.replace("\\\n", " ")), run.stdout
    run = subprocess.run(["make", "-n", "run", "ADDRESS=0.0.0.0"], cwd=ROOT, capture_output=True, text=True)
    assert "--server.address 0.0.0.0" in run.stdout
    for name in ("Dockerfile", "Dockerfile.cuda"):
        text = (ROOT / name).read_text()
        assert '"--server.address", "0.0.0.0"' in text and "-p 127.0.0.1:8501:8501" in text


def errors(at) -> list[str]:
    assert not at.exception, [e.value for e in at.exception]
    return [e.value for e in at.error]


def save(at, target: str, overwrite: bool = False) -> list[str]:
    at.text_input(key="w:prune_out").set_value(target)
    box = at.checkbox(key="prune_overwrite")
    box.check() if overwrite else box.uncheck()
    at.button(key="prune_save").click().run()
    return errors(at)


def test_save_goes_under_the_output_root_and_bad_paths_are_one_sentence(monkeypatch, lm_dir, tmp_path):
    root = tmp_path / "outputs"
    monkeypatch.setenv(writes.OUTPUT_ROOT_ENV, str(root))
    monkeypatch.delenv(writes.LOCAL_ENV, raising=False)
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("l1")
    click(at, "prune_run")
    assert at.text_input(key="w:prune_out").value.startswith(Path(lm_dir).name + "-l1-dk")  # a name, not a path
    assert any(str(root) in c.value for c in at.caption)

    bad = {"/proc/nope/x": "Give a folder name, not a path", "../../etc": "Give a folder name, not a path",
           "x" * 5000: "5000 characters long", "": "Give a name"}
    for target, fragment in bad.items():
        [message] = save(at, target)
        assert fragment in message and one_sentence(message) and len(message) < 300, message
    # a path is refused before the file system is asked: the answer never tells which server paths exist
    assert save(at, "/etc/passwd") == save(at, "/no/such/place") == save(at, "/proc/nope/x")

    assert save(at, "half") == [] and at.success                            # the page still works
    marker = json.loads((root / "half" / writes.MARKER).read_text())
    assert "model.safetensors" in marker["files"]
    assert save(at, "half", overwrite=True) == []                           # our own model: replaced

    foreign = root / "someone-elses"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    [message] = save(at, "someone-elses", overwrite=True)
    assert "was not written by this tool" in message and one_sentence(message)
    assert (foreign / "notes.txt").read_text() == "keep me"

    monkeypatch.setenv(writes.LOCAL_ENV, "1")   # a user running the dashboard for themselves: any local path
    for target, fragment in {"/proc/nope/x": "nothing can be created in /proc",
                             "/sys/state-rank-test": "nothing can be created in /sys",
                             str(tmp_path / ("y" * 5000)): "5000 characters long"}.items():
        [message] = save(at, target)
        assert fragment in message and one_sentence(message), message
    user = tmp_path / "my-folder"
    user.mkdir()
    (user / "data.csv").write_text("1,2")
    [message] = save(at, str(user), overwrite=True)
    assert "was not written by this tool" in message and (user / "data.csv").read_text() == "1,2"
    assert save(at, str(tmp_path / "anywhere" / "model")) == [] and (tmp_path / "anywhere" / "model").is_dir()


def test_remote_clients_never_see_a_traceback():
    """Issue 25 Build 8: tracebacks stay in the server log ("none": the client is told only that an error happened)."""
    from streamlit import config as st_config
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["showErrorDetails"] == "none"
    assert "none" in {v.value for v in st_config.ShowErrorDetailsConfigOptions}
