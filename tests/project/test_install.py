"""Issue 43 item 5: `pip install .` installs analysis, ui, the dashboard's shell and the bundled samples, with two
console commands that work from anywhere and import the installed copy, not the checkout."""
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_build_backend_is_pinned_in_requirements():
    backend = pyproject()["build-system"]["requires"]
    pins = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert len(backend) == 1 and backend[0] in pins and "==" in backend[0], backend


def test_the_console_commands_name_functions_that_exist():
    import importlib
    scripts = pyproject()["project"]["scripts"]
    assert set(scripts) == {"state-rank", "state-rank-dashboard"}
    for target in scripts.values():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), target


def test_the_dashboard_command_listens_on_this_machine_unless_told_otherwise():
    from ui.shared.launch import CONFIG, config_flags
    flags = config_flags(CONFIG, [])
    assert flags[flags.index("--server.address") + 1] == "127.0.0.1"
    assert flags[flags.index("--server.fileWatcherType") + 1] == "none"     # the checkout's settings, as flags
    assert "--server.address" not in config_flags(CONFIG, ["--server.address", "0.0.0.0"])   # the user's wins
    assert config_flags(ROOT / "no-such.toml", [])[:2] == ["--server.address", "127.0.0.1"]


def checkout_copy(dest: Path) -> Path:
    """The files of this checkout that git tracks or would track (not .venv, caches, outputs)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.mark.slow
def test_pip_install_target_gives_working_commands_outside_the_checkout(tmp_path):
    source, target, elsewhere = checkout_copy(tmp_path / "src"), tmp_path / "installed", tmp_path / "elsewhere"
    elsewhere.mkdir()
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(target), "."], cwd=source, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    shutil.rmtree(source)   # the commands cannot lean on the copy they were built from
    env = {**os.environ, "PYTHONPATH": str(target), "HOME": str(tmp_path / "home")}

    def command(*args):
        return subprocess.run([str(target / "bin" / args[0]), *args[1:]], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=300)

    helped = command("state-rank", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: state-rank ") and "prune" in helped.stdout
    listed = command("state-rank", "models", "--json", "-")
    assert listed.returncode == 0, listed.stderr
    samples = {s["name"]: s["path"] for s in json.loads(listed.stdout)["samples"]}
    assert {"deltanet-small", "gated-deltanet-small"} <= set(samples)
    assert all(Path(p).is_relative_to(target / "sample_models") for p in samples.values()), samples
    assert command("state-rank", "models").stdout.splitlines()[0].startswith("deltanet-recall")
    where = subprocess.run([sys.executable, "-c", "import analysis, ui.shell.pages, ui.shared.launch as l; "
                            "print(analysis.__file__, l.APP, l.CONFIG.is_file())"],
                           cwd=elsewhere, env=env, capture_output=True, text=True)
    module, app, config = where.stdout.split()
    assert Path(module).is_relative_to(target) and Path(app) == target / "ui" / "shell" / "app.py" and config == "True"
    assert (target / "ui" / "shell" / "pages" / "model.py").is_file() and (target / "ui" / "assets" / "favicon.png").is_file()
    assert not (target / "ui" / "shell" / "setup.py").exists() and not (target / "pages").exists()
    saves = subprocess.run([sys.executable, "-c", "from analysis.io import writes, point_cache as c; "
                            "print(writes.CHECKOUT, writes.output_root(), c.CACHE_DIR)"],
                           cwd=elsewhere, env={k: v for k, v in env.items() if not k.startswith("STATE_RANK_")},
                           capture_output=True, text=True)
    checkout, outputs, cache = saves.stdout.split()   # an installed copy never writes into site-packages
    assert checkout == "False" and outputs == str(tmp_path / "home" / "state-rank" / "outputs"), saves.stdout
    assert cache == str(tmp_path / "home" / "state-rank" / "cache" / "sweeps")


def test_a_checkout_keeps_its_outputs_inside_it():
    from analysis.io import writes
    assert writes.CHECKOUT and writes.REPO_ROOT == ROOT
