"""Issue 11 item 1: nothing the project did not write is ever deleted or replaced; --out is checked first.

The destructive cases run against a COPY of the project (old code would delete the copy, never the
real tree) and against folders under tmp_path.
"""
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.io import writes
from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.io.model_dir import save_model
from family_cases.text_lm import build_tiny

ROOT = Path(__file__).resolve().parents[2]


def snapshot(folder: Path) -> dict:
    """Every entry under `folder` with its type, size and modification time."""
    found = {}
    for base, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(base) / name
            info = path.lstat()
            found[str(path.relative_to(folder))] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns)
    return found


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory):
    """The project's code and one real bundled sample, copied; a fake .git marks it as a checkout."""
    copy = tmp_path_factory.mktemp("project") / "state-rank"
    keep_samples = {"deltanet-small", "tokenizer", "data"}

    def ignore(folder, names):
        skip = {".venv", ".git", "__pycache__", "artifacts", ".cache"}
        if Path(folder).resolve() == ROOT:  # the root's output folders, not the packages named alike (analysis/runs)
            skip |= {"docs", "outputs", "runs"}
        if Path(folder).resolve() == ROOT / "sample_models":
            skip |= {n for n in names if n not in keep_samples}
        return skip & set(names)
    shutil.copytree(ROOT, copy, ignore=ignore, symlinks=True)
    (copy / ".git").mkdir()
    (copy / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return copy


def test_prune_out_never_replaces_the_project_cwd_samples_or_user_folders(project_copy, tmp_path):
    """The acceptance commands of issue 11, run from the project root (of a copy) in one interpreter."""
    user = tmp_path / "my-results"
    user.mkdir()
    (user / "notes.txt").write_text("a week of work")
    own_model = tmp_path / "my-own-model"          # a model folder, but not written by this tool
    build_tiny("delta_net").save_pretrained(own_model)
    outs = ["", ".", str(project_copy), "sample_models/deltanet-small", str(user), str(own_model)]
    before = {"project": snapshot(project_copy), "user": snapshot(tmp_path)}
    driver = (
        "import contextlib, io, json, sys\n"
        "from analysis.cli.main import main\n"
        "for out in json.loads(sys.argv[1]):\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        rc = main(['prune', 'deltanet-small', '--strategy', 'l1', '--ratio', '0.5', '--out', out,\n"
        "                   '--overwrite', '--eval-tokens', '256', '--device', 'cpu'])\n"
        "    print(json.dumps({'out': out, 'rc': rc, 'stderr': err.getvalue()}), flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", driver, json.dumps(outs)], cwd=project_copy, env=env,
                         capture_output=True, text=True, timeout=900)
    assert snapshot(project_copy) == before["project"], "a file of the project copy changed"
    assert snapshot(tmp_path) == before["user"], "a user file changed"
    assert run.returncode == 0, run.stderr[-2000:]
    results = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [r["out"] for r in results] == outs
    for r in results:
        lines = [line for line in r["stderr"].splitlines() if line.startswith("error: ")]
        assert r["rc"] == 2 and len(lines) == 1 and "Traceback" not in r["stderr"], r
    messages = [r["stderr"] for r in results]
    assert "No output directory given" in messages[0]
    assert "is the working directory" in messages[1]
    assert "is the working directory" in messages[2]  # the project root, which is also the cwd here
    assert "is a bundled sample" in messages[3]
    assert "was not written by this tool" in messages[4] and "was not written by this tool" in messages[5]


@pytest.mark.parametrize("make, fragment", [
    (lambda t: (t / "file").write_text("x") and t / "file", "is a file, not a directory"),
    (lambda t: (t / "file").write_text("x") and t / "file" / "model", "is a file, so"),
    (lambda t: Path("/proc/nope/x"), "nothing can be created in /proc"),
    (lambda t: Path("/sys/state-rank-test"), "nothing can be created in /sys"),           # read-only for root too
    (lambda t: t / ("n" * 5000), "5000 characters long"),
    (lambda t: t / "a\0b", "NUL character"),
    (lambda t: (t / "link").symlink_to(t) or t / "link", "symbolic link"),
])
def test_bad_out_is_one_sentence_before_any_work(tmp_path, capsys, make, fragment):
    out = make(tmp_path)
    before = snapshot(tmp_path)
    # a model name that does not exist: had --out been checked after loading, the error would name the model
    assert main(["prune", "no-such-model", "--strategy", "l1", "--ratio", "0.5", "--out", str(out),
                 "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err, err
    assert snapshot(tmp_path) == before


def test_read_only_directory(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions (the /sys case above covers a read-only place)")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(AnalysisError, match="permission denied"):
            writes.check_new_dir(folder / "model")
    finally:
        folder.chmod(0o755)


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_overwrite_replaces_only_our_own_model_and_keeps_the_old_until_the_new_is_complete(tmp_path):
    model = build_tiny("delta_net")
    out = save_model(model, tmp_path / "pruned", metadata={"n": 1})
    marker = json.loads((out / writes.MARKER).read_text())
    assert marker["kind"] == "pruned model" and "config.json" in marker["files"] and "pruning.json" in marker["files"]
    assert writes.replace_refusal(out) is None

    def fail(folder):
        raise AnalysisError("stop while writing")
    with pytest.raises(AnalysisError, match="stop while writing"):    # a failed save leaves the old model
        save_model(model, out, metadata={"n": 2}, overwrite=True, extra=fail)
    assert json.loads((out / "pruning.json").read_text()) == {"n": 1}
    save_model(model, out, metadata={"n": 3}, overwrite=True)
    assert json.loads((out / "pruning.json").read_text()) == {"n": 3}
    assert listing(tmp_path) == ["pruned"]                               # no temporary or moved-aside folder left

    (out / "my-notes.txt").write_text("added by the user")               # now it holds a file we did not write
    with pytest.raises(AnalysisError, match=r"holds files this tool did not write \(my-notes.txt\)"):
        save_model(model, out, overwrite=True)
    assert (out / "my-notes.txt").read_text() == "added by the user"


def test_saved_models_have_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        out = save_model(build_tiny("delta_net"), tmp_path / "m")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755                  # mkdtemp alone would leave 0700
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o644}


def test_replace_refusals_name_the_reason(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "working directory" in writes.replace_refusal(tmp_path)
    assert "working directory" in writes.replace_refusal(tmp_path.parent)
    assert "holds this project" in writes.replace_refusal(ROOT)
    assert "working directory" in writes.replace_refusal("/")
    assert "bundled sample" in writes.replace_refusal(ROOT / "sample_models" / "deltanet-small")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / writes.MARKER).write_text("not json")
    assert "no valid" in writes.replace_refusal(fake)


def test_dashboard_save_names_stay_under_the_output_root(tmp_path, monkeypatch):
    monkeypatch.setenv(writes.OUTPUT_ROOT_ENV, str(tmp_path / "outputs"))
    monkeypatch.delenv(writes.LOCAL_ENV, raising=False)
    assert writes.output_target("dn-half") == tmp_path / "outputs" / "dn-half"
    for bad in ["/proc/nope/x", "../escape", "a/b", ".", "..", ".hidden", "~", ""]:
        with pytest.raises(AnalysisError):
            writes.output_target(bad)
    with pytest.raises(AnalysisError, match="5000 characters long"):
        writes.output_target("x" * 5000)
    monkeypatch.setenv(writes.LOCAL_ENV, "1")                          # the user runs it for themselves
    assert writes.output_target("/somewhere/else") == Path("/somewhere/else")
    assert writes.output_target("rel/dir") == tmp_path / "outputs" / "rel" / "dir"


def test_outputs_folder_is_ignored_by_git():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    run = subprocess.run(["git", "check-ignore", "-q", "outputs/some-model/config.json"], cwd=ROOT)
    assert run.returncode == 0


def test_files_the_tool_adds_later_keep_a_model_replaceable(tmp_path):
    """A model card written into a saved model (python -m analysis card) is recorded in the marker."""
    out = save_model(build_tiny("delta_net"), tmp_path / "m")
    writes.write_text(out / "README.md", "# card\n")
    assert "holds files this tool did not write (README.md)" in writes.replace_refusal(out)
    writes.record_written(out, ["README.md"])
    assert writes.replace_refusal(out) is None
