"""Issue 25, defect 7: every size a user can type passes one memory and work estimate before the work starts.

The CLI runs in-process on a tiny random-init checkpoint. Memory available is fixed at 16 GB and one forward
pass at 0.5 s (a slow machine), so refusals are the same everywhere; each refusal must come well before any
big allocation (peak RSS barely moves) and quickly.
"""
from __future__ import annotations

import re
import resource
import time

import pytest

from analysis.models import limits, workload
from analysis.io import point_cache
from analysis.cli.main import main

AVAILABLE = 16 * 10**9


@pytest.fixture(autouse=True)
def fixed_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "available_memory", lambda device="cpu": AVAILABLE)
    monkeypatch.setattr(workload, "forward_seconds", lambda model, batch, tokens: 0.5)
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")


MEMORY = r"needs about [\d.]+ [TGM]B of memory, more than the 8\.0 GB one request may use"
TIME = r"≈ (at least )?[\d.,]+ (min|h|days) here, more than the 60 min a request may take unconfirmed; .*pass --yes"
PROBES = [
    ("prune wanda --calib-sequences 1e9", ["prune", "{m}", "--strategy", "wanda", "--ratio", "0.5",
                                           "--calib-sequences", "1e9", "--out", "{tmp}/p"], "Calibration on 1,000,000,000 × 256 tokens " + MEMORY),
    ("importance --calib-sequences 1e9", ["importance", "{m}", "--calib-sequences", "1e9"], "Calibration .*" + MEMORY),
    ("sensitivity --calib-sequences 1e9", ["sensitivity", "{m}", "--strategy", "l1", "--calib-sequences", "1e9"],
     "Calibration .*" + MEMORY),
    ("sweep --calib-sequences 1e9", ["sweep", "{m}", "--calib-sequences", "1e9"], "Calibration .*" + MEMORY),
    ("prune --calib-tokens 4096 --calib-sequences 1e5", ["prune", "{m}", "--strategy", "pca", "--ratio", "0.5",
     "--calib-tokens", "4096", "--calib-sequences", "1e5", "--out", "{tmp}/p"], "Calibration .*" + MEMORY),
    ("noise --samples 1e9", ["noise", "{m}", "--samples", "1e9"], "Monte Carlo .* " + MEMORY),
    ("prune --recover-steps 1e9", ["prune", "{m}", "--strategy", "l1", "--ratio", "0.5", "--recover-steps", "1e9",
                                   "--out", "{tmp}/p"], "Recovery fine-tuning: 1,000,000,000 training steps .*" + TIME),
    ("sweep --recover-steps 1e9", ["sweep", "{m}", "--recover-steps", "1e9"], "The sweep: 19 points .*" + TIME),
    ("sweep --eval-tokens 1e9 --context 16", ["sweep", "{m}", "--eval-tokens", "1e9", "--context", "16"],
     "The sweep: .*" + TIME),
    ("sensitivity --context 16 --eval-tokens 1e6", ["sensitivity", "{m}", "--strategy", "l1", "--context", "16",
                                                    "--eval-tokens", "1000000", "--ratios", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8"],
     "The sensitivity map: 17 points .*" + TIME),
    ("ppl --stride 1", ["ppl", "{m}", "--stride", "1"], "Scoring perplexity with stride 1: [\\d,]+ forward passes .*" + TIME),
    ("ppl --context 1e6", ["ppl", "{m}", "--context", "1000000"], "Scoring perplexity .*" + MEMORY),
    ("latency --tokens 1e7", ["latency", "{m}", "--tokens", "1e7"], MEMORY),
    ("rank --batch 1e9", ["rank", "{m}", "--batch", "1e9"], MEMORY),
    ("train --steps 1e12", ["train", "--out", "{tmp}/p", "--steps", "1e12"],
     "Training [\\d,]+ parameters: 1,000,000,000,000 steps .*modelled from FLOPs.*" + TIME),
]


def run(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("probe, args, message", PROBES, ids=[p[0] for p in PROBES])
def test_absurd_size_is_one_sentence_before_any_work(probe, args, message, tiny_dirs, tmp_path, capsys):
    argv = [a.format(m=tiny_dirs["delta_net"], tmp=tmp_path) for a in args]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    code, _, err = run(argv, capsys)
    assert time.perf_counter() - start < 10  # loading the tiny model included; the work itself never starts
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 300 * 1024  # kB: no big allocation
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "p").exists()


def test_stride_1_prints_its_estimate_and_runs_with_yes(tiny_dirs, monkeypatch, capsys):
    """300 tokens at stride 1 = 285 windows = 36 forwards of 8 × 16: at 110 s each, 66 minutes."""
    monkeypatch.setattr(workload, "forward_seconds", lambda model, batch, tokens: 110.0)
    argv = ["ppl", tiny_dirs["delta_net"], "--stride", "1", "--context", "16", "--max-tokens", "300", "--quiet"]
    code, out, err = run(argv, capsys)
    one_line = "36 forward passes of 8 × 16 tokens × 110.0 s (measured) ≈ 66 min"
    assert code == 2 and one_line in err and "pass --yes" in err, err
    code, out, err = run(argv + ["--yes"], capsys)
    assert code == 0, err
    line = [x for x in err.splitlines() if x.startswith("estimate: ")]
    assert len(line) == 1 and one_line in line[0], err
    assert "stride 1" in out and "300 tokens" in out


def test_short_work_starts_without_an_estimate_line(tiny_dirs, capsys):
    code, _, err = run(["ppl", tiny_dirs["delta_net"], "--context", "64", "--max-tokens", "256", "--quiet"], capsys)
    assert code == 0 and "estimate" not in err, err


def test_forward_seconds_is_measured_once_per_shape(monkeypatch):
    from family_cases.text_lm import build_tiny
    monkeypatch.undo()
    model = build_tiny("delta_net")
    first = workload.forward_seconds(model, 1, 16)
    assert 0 < first < 30
    assert workload.forward_seconds(model, 1, 16) == first  # cached: no second timing


def test_a_new_model_is_timed_afresh_and_a_freed_ones_timings_go(monkeypatch):
    """Timings are held by the model object, not id(model): a new model that reuses a freed one's id must not
    inherit its time (the old key was (id(model), …))."""
    import gc
    from family_cases.text_lm import build_tiny
    monkeypatch.undo()
    model = build_tiny("delta_net")
    workload.forward_seconds(model, 1, 16)
    assert model in workload._forwards
    held = len(workload._forwards)
    del model
    gc.collect()
    assert len(workload._forwards) == held - 1
    other = build_tiny("delta_net")
    assert other not in workload._forwards
    workload.forward_seconds(other, 1, 16)
    assert (next(other.parameters()).device, 1, 16) in workload._forwards[other]


def test_calibration_estimate_grows_with_the_kept_activations():
    from family_cases.text_lm import build_tiny
    model = build_tiny("delta_net")
    small, big = limits.calibration_bytes(model, 16, 256), limits.calibration_bytes(model, 16_000, 256)
    assert big > 20 * small  # 1,000 × the tokens: the kept q/k activations dominate
