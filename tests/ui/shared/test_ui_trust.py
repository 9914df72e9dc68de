"""Pure pieces behind issue 13's dashboard fixes: colour-scale ranges, the result store, shared calibration."""
import numpy as np
import pytest

from analysis.evaluate.measure import Evaluation
from ui.shared import memo, scales
from ui_fixtures import save_tiny_lm


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return save_tiny_lm(tmp_path_factory.mktemp("trust-lm"))


def test_full_colour_range_per_metric():
    assert scales.full_range("rank_utilization", 64) == (0.0, 1.0)
    assert scales.full_range("stable_rank", 64) == (0.0, 64.0)
    assert scales.full_range("condition_number", 64, tau=1e-3) == (0.0, 1000.0)
    assert scales.full_range("fro_norm", 64) is None
    a, b = np.array([[0.016, 0.019]]), np.array([[0.010, np.nan]])
    assert scales.colour_range(scales.FULL, "rank_utilization", [a], 64) == (0.0, 1.0)
    assert scales.colour_range(scales.DATA, "rank_utilization", [a], 64) is None          # auto, one map
    assert scales.colour_range(scales.DATA, "rank_utilization", [a, b], 64) == (0.010, 0.019)  # shared
    assert scales.colour_range(scales.FULL, "fro_norm", [a, b], 64) == (0.0, 0.019)
    assert scales.choice_label(scales.FULL, "rank_utilization", 64) == "fixed 0–1"
    assert "1/τ = 1000" in scales.tau_note("condition_number") and scales.tau_note("stable_rank") == ""


def test_memo_store_computes_once_per_key_and_forgets_the_oldest():
    calls = []

    @memo.memoized("test-store", max_entries=2)
    def square(x, offset=0, *, progress):
        progress(0.5, f"squaring {x}")
        calls.append(x)
        return x * x + offset

    square.clear()
    steps = []
    assert square(3, progress=lambda f, t: steps.append(t)) == 9 and steps == ["squaring 3"]
    assert square(3, 0) == 9 and square.is_cached(3) and square.is_cached(3, offset=0)   # defaults: one key
    assert calls == [3]
    square(4)
    square(5)                       # evicts 3, the least recently used
    assert not square.is_cached(3) and square.is_cached(5)
    with pytest.raises(ZeroDivisionError):
        memo.store("test-store-2", 2).get("k", lambda: 1 / 0)
    assert "k" not in memo.store("test-store-2", 2)   # a failure stores nothing


def test_the_sweep_takes_the_calibration_it_is_given(lm):
    """Sweep, Prune and Channel importance share one calibration: the sweep asks for it once, computes none."""
    import analysis.runs.sweep as sweeps
    from analysis.models import load as models
    from analysis.shrink.calibration import calibrate
    model = models.load_model(str(lm), "cpu", "float32")
    tok = models.load_tokenizer(str(lm))
    calib = calibrate(model, tok, 2, 64, 0)
    asked = []
    points = list(sweeps.sweep(model, tok, ["random", "wanda", "pca"], [0.5],
                               Evaluation(context=64, max_tokens=128, latency=False), use_cache=False,
                               calibration=lambda: asked.append(1) or calib))
    assert len(points) == 4 and asked == [1]   # two strategies need it: asked once, never computed


def test_shared_calibration_is_the_one_the_other_pages_use(lm):
    from ui.shared import shrink
    from ui.shared.keys import ModelKey
    key = ModelKey(str(lm), "cpu", "float32")
    steps = []
    first = shrink.calibration(key, shrink.CalibrationSettings(2, 256, 0), progress=lambda f, t: steps.append(t))
    assert shrink.shared_calibration(key, 2)() is first                 # no second computation
    assert "layer 1 of 2: activations entering the recurrence" in steps and steps[0].startswith("drawing")


def test_shared_calibration_reports_its_passes_when_it_computes(lm):
    """The Sweep and Prune jobs see the calibration's per-layer progress on its first computation (big models
    spend minutes there), and nothing once it is stored."""
    from ui.shared import shrink
    from ui.shared.keys import ModelKey
    key = ModelKey(str(lm), "cpu", "float32")
    steps = []
    shrink.shared_calibration(key, 3, seed=5, progress=lambda f, t: steps.append((f, t)))()
    texts = [t for _, t in steps]
    assert texts[0].startswith("drawing") and "layer 2 of 2: activations entering the recurrence" in texts
    assert [f for f, _ in steps] == sorted(f for f, _ in steps) and all(0 <= f <= 1 for f, _ in steps)
    again = []
    shrink.shared_calibration(key, 3, seed=5, progress=lambda f, t: again.append(t))()
    assert again == []


def test_a_rerun_requested_mid_computation_is_obeyed_only_after_the_work(monkeypatch):
    """A widget click during a long first computation must not throw the work away (it is stored first)."""
    from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

    from ui.shared import progress
    steps = progress.Steps("Collecting…")

    def rerun_requested(*_args, **_kwargs):
        raise RerunException(None)

    monkeypatch.setattr(steps.bar, "progress", rerun_requested)
    steps(0.5, "layer 1 of 2")          # the request arrives here: recorded, not raised
    steps(0.9, "layer 2 of 2")
    with pytest.raises(RerunException):
        steps.done("Collected")
