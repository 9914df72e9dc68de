"""Sweeps on Ray (issue 14, item 6): same numbers and cache as in-process, a killed worker is retried,
a second run comes from the cache; bad input is one sentence and writes nothing."""
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import analysis.runs.sweep as sweep_mod
from analysis.models import load as models
from analysis.io import ray_executor
from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.evaluate.measure import Evaluation
from analysis.io.points import Executor
from analysis.shrink.calibration import CalibrationSettings

STRATEGIES = ["random", "l1", "wanda", "grad", "pca", "drrqr"]
RATIOS = [0.25, 0.5, 0.75]
SMALL = dict(evaluation=Evaluation("test", 64, 128, latency=False), calib=CalibrationSettings(2, 64))
VOLATILE = {"cached"}


def _run(model, tok, cache: Path, monkeypatch, **kwargs):
    monkeypatch.setattr(point_cache, "CACHE_DIR", cache)
    return list(sweep_mod.sweep(model, tok, STRATEGIES, RATIOS, **SMALL, **kwargs))


def _by_point(points):
    return {(p["strategy"], p["ratio"]): {k: v for k, v in p.items() if k not in VOLATILE} for p in points}


class _KillOnce(threading.Thread):
    """Kills (SIGKILL) the first Ray worker seen running a sweep point: a worker lost mid-task."""

    def __init__(self):
        super().__init__(daemon=True)
        self.killed, self.done = None, threading.Event()

    def run(self):
        while not self.done.is_set() and self.killed is None:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    title = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if title.startswith(b"ray::_point_task"):
                    os.kill(int(pid), signal.SIGKILL)
                    self.killed = int(pid)
                    return
            time.sleep(0.05)


@pytest.fixture(scope="module")
def local_ray():
    ray = ray_executor.connect(num_cpus=2)
    yield ray
    ray.shutdown()
    ray_executor._started.clear()


@pytest.mark.slow
@pytest.mark.ray
def test_ray_sweep_equals_in_process_survives_a_killed_worker_and_resumes(local_ray, tmp_path, monkeypatch):
    model = models.load_model("deltanet-small", "cpu")
    tok = models.load_tokenizer(model)
    here = _run(model, tok, tmp_path / "in-process", monkeypatch)

    killer = _KillOnce()
    killer.start()
    remote = _run(model, tok, tmp_path / "ray", monkeypatch, executor=Executor("ray", num_cpus=2))
    killer.done.set()
    assert killer.killed is not None, "no Ray worker was seen running a point"
    assert len(remote) == 1 + len(STRATEGIES) * len(RATIOS) and remote[0]["strategy"] == "unpruned"
    assert not any(p["cached"] for p in remote)
    assert _by_point(remote) == _by_point(here)  # exactly the same numbers, every field
    # the same cache entries under the same keys, byte for byte
    files = sorted(p.name for p in (tmp_path / "in-process").glob("*.json"))
    assert files == sorted(p.name for p in (tmp_path / "ray").glob("*.json")) and len(files) == len(remote)
    for name in files:
        assert json.loads((tmp_path / "ray" / name).read_text()) == json.loads((tmp_path / "in-process" / name).read_text())

    again = _run(model, tok, tmp_path / "ray", monkeypatch, executor=Executor("ray", num_cpus=2))
    assert all(p["cached"] for p in again) and _by_point(again) == _by_point(here)


def test_unreachable_address_is_one_sentence_and_writes_nothing(tiny_model_dir, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setattr(point_cache, "CACHE_DIR", cache)
    code = main(["sweep", str(tiny_model_dir), "--strategies", "l1", "--ratios", "0.5", "--no-latency",
                 "--eval-tokens", "64", "--context", "32", "--executor", "ray", "--address", "127.0.0.1:9",
                 "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: Cannot reach the Ray cluster at 127.0.0.1:9")
    assert err.count("\n") == 0 and "ray start --head" in err
    assert not cache.exists()


def test_bad_address_and_address_without_ray(tiny_model_dir, capsys):
    args = ["sweep", str(tiny_model_dir), "--strategies", "l1", "--ratios", "0.5", "--no-latency", "--quiet"]
    assert main([*args, "--address", "127.0.0.1:9"]) == 2
    assert "add --executor ray" in capsys.readouterr().err
    with pytest.raises(AnalysisError, match="not host:port"):
        ray_executor.connect("no-port-here")


def test_ray_not_installed_says_how_to_install(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    assert main(["sweep", str(tiny_model_dir), "--strategies", "l1", "--ratios", "0.5", "--no-latency",
                 "--executor", "ray", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "pip install ray==2.60.0" in err and err.count("\n") == 1
    assert not (tmp_path / "cache").exists()


def test_unknown_executor_is_refused():
    with pytest.raises(AnalysisError, match="Unknown executor"):
        ray_executor.check_executor("dask")
