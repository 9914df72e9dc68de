"""Cancel tokens in the core's long loops: a stop takes effect within one window / batch / step, and a
cancelled sweep or sensitivity point writes nothing to the point cache."""
import threading

import pytest
import torch

from analysis.data import corpus as data
from analysis.runs import sweep as sweep_mod
from analysis.io import point_cache
from analysis.shrink.calibration import calibrate
from analysis.runtime.cancel import Cancelled, check
from analysis.evaluate.perplexity import perplexity
from analysis.shrink.recovery import RecoverySettings, recover
from analysis.shrink.sensitivity import MapSettings, sensitivity_points
from analysis.evaluate.measure import Evaluation
from family_cases.text_lm import build_tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class After:
    """A cancel callable that turns True on its n-th call (and counts the calls after that)."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


@pytest.fixture(scope="module")
def model_tok():
    return build_tiny("delta_net"), data.load_tokenizer()


def test_check_takes_an_event_or_a_callable():
    check(None)
    check(lambda: False)
    event = threading.Event()
    check(event)
    event.set()
    with pytest.raises(Cancelled):
        check(event)
    with pytest.raises(Cancelled):
        check(lambda: True)


def test_perplexity_stops_between_windows(model_tok):
    model, tok = model_tok
    done = []
    with pytest.raises(Cancelled):
        perplexity(model, tok, "test", 32, max_tokens=32 * 40, batch=2, progress=done.append, cancel=After(3))
    assert len(done) == 2  # two batches of windows ran, the third was never started (of 20)


def test_calibration_stops_between_batches(model_tok):
    model, tok = model_tok
    event = threading.Event()
    event.set()
    with pytest.raises(Cancelled):
        calibrate(model, tok, n_sequences=16, seq_len=32, cancel=event)


def test_recovery_stops_inside_a_step(model_tok):
    """Issue 29: the stop is checked at every block of a training step's forward, not only between steps, so a
    slow step on a loaded host does not delay it: a stop that arrives after step 3 began ends step 3 unfinished."""
    model, tok = model_tok
    steps, calls = [], []

    def stop_inside_step_3():
        if steps == [1, 2]:
            calls.append(1)
        return len(calls) >= 2  # the loop's own check at step 3's start, then the first block's inside it

    with pytest.raises(Cancelled):
        recover(model, tok, RecoverySettings(method="qk", steps=50, batch=1, seq_len=16, eval_tokens=32),
                progress=lambda e: e["kind"] == "train" and steps.append(e["step"]), cancel=stop_inside_step_3)
    assert steps == [1, 2]


def test_a_cancelled_sweep_point_writes_nothing(model_tok, tmp_path, monkeypatch):
    """Stop during a point's recovery steps: Cancelled within a step, and only the baseline is cached."""
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    model, tok = model_tok
    stop = threading.Event()
    gen = sweep_mod.sweep(model, tok, ["l1"], [0.5], Evaluation(context=32, max_tokens=64, latency=False),
                          recover_steps=200, cancel=lambda: stop.is_set())
    next(gen)  # the baseline, cached
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
    import analysis.shrink.recovery as recovery_mod
    real = recovery_mod.recover

    def stop_at_step_3(*args, progress=None, **kwargs):
        def tick(event):
            if event["step"] == 3:
                stop.set()
        return real(*args, progress=tick, **kwargs)
    monkeypatch.setattr(sweep_mod, "recover", stop_at_step_3)
    with pytest.raises(Cancelled):
        next(gen)
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1  # no entry for the stopped point


def test_a_cancelled_sensitivity_point_writes_nothing(model_tok, tmp_path, monkeypatch):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    model, tok = model_tok
    calls = After(10**9)
    s = MapSettings("l1", (0.5,), context=32, eval_tokens=32 * 8)
    gen = sensitivity_points(model, tok, s, cancel=calls)
    next(gen)  # baseline
    cached = len(list((tmp_path / "cache").glob("*.json")))
    calls.n = calls.calls + 2  # the point's first window runs, the second is refused
    with pytest.raises(Cancelled):
        next(gen)
    assert len(list((tmp_path / "cache").glob("*.json"))) == cached


def test_a_stop_lands_inside_a_training_steps_backward(model_tok):
    """Issue 29: the blocks' outputs carry the check into the backward pass, which no forward hook sees."""
    from analysis.archs import adapter_for
    from analysis.runtime.cancel import checked_inside
    model, _ = model_tok
    model.train()
    stop = threading.Event()
    blocks = [b.module for b in adapter_for(model).blocks(model)]
    ids = torch.randint(0, 100, (1, 16))
    try:
        with checked_inside(blocks, stop):
            loss = model(ids, use_cache=False).logits.float().square().mean()
        stop.set()  # the forward is done; the stop arrives before the backward
        with pytest.raises(Cancelled):
            loss.backward()
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert not any(h for b in blocks for h in (b._forward_pre_hooks, b._forward_hooks))  # nothing left behind
