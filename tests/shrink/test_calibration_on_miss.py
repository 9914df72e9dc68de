"""A calibration (train-split windows through every layer with hooks: seconds to minutes on a large model) is drawn
only when a PRUNED point misses the point cache: a map or a Verify measurement whose only missing point is the
unpruned model's recomputes that point and draws nothing."""
import json

import pytest

import analysis.shrink.sensitivity as sensitivity
from analysis.data import corpus as data
from analysis.data.roles import TextRole, TokenStretch
from analysis.io import point_cache
from analysis.models.key_plan import plan_key_dims
from analysis.shrink.sensitivity import MapSettings, sensitivity_points
from analysis.shrink.stretch_measure import StretchMeasure
from family_cases.text_lm import build_tiny

pytestmark = pytest.mark.usefixtures("sweep_cache", "one_torch_thread")


def forget_unpruned() -> int:
    """Remove the cache entries of unpruned points (as a cache cleared of them, or a code change of that point)."""
    gone = 0
    for entry in point_cache.CACHE_DIR.glob("*.json"):
        if json.loads(entry.read_text())["key"].get("point") == "unpruned":
            entry.unlink()
            gone += 1
    return gone


def test_the_map_draws_no_calibration_when_only_its_unpruned_point_misses(monkeypatch):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    s = MapSettings("wanda", (0.5,), context=64, eval_tokens=128, calib_sequences=2, calib_tokens=64)
    drawn, real = [], sensitivity.calibrate
    monkeypatch.setattr(sensitivity, "calibrate", lambda *a, **k: drawn.append(1) or real(*a, **k))
    first = list(sensitivity_points(model, tok, s))
    assert drawn == [1] and not any(p["cached"] for p in first)  # wanda needs it: the spy sees real draws
    assert forget_unpruned() == 1
    again = list(sensitivity_points(model, tok, s))
    assert drawn == [1]
    assert [p["cached"] for p in again] == [False, True, True]
    assert again[0]["value"] == pytest.approx(first[0]["value"], rel=1e-9)


def test_verify_draws_no_calibration_when_only_the_unpruned_point_misses():
    """The stretch measurer (Verify and choose, the recommendation) measures the unpruned model and its plans in
    one run of the point executor: the executor handed `shared` every point after the first miss, cached or not,
    so a missing unpruned point drew the calibration for plans the cache already held."""
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    stretch = TokenStretch(TextRole.CHOICE, "validation", 0, 128, 64)
    calib = {"calib_sequences": 2, "calib_tokens": 64}
    plans = [None, plan_key_dims(model, ratio=0.5), plan_key_dims(model, ratios=[0.5, 0.0])]
    drawn = []

    def calibration():
        drawn.append(1)
        return sensitivity.calibrate(model, tok, 2, 64, 0)
    first = dict(StretchMeasure(model, tok, stretch, "wanda", calib).measure_all(plans, calibration))
    assert drawn == [1]
    assert forget_unpruned() == 1
    again = dict(StretchMeasure(model, tok, stretch, "wanda", calib).measure_all(plans, calibration))
    assert drawn == [1]
    assert not again[None]["cached"] and all(again[tuple(d)]["cached"] for d in plans[1:])
    assert again[None]["value"] == pytest.approx(first[None]["value"], rel=1e-9)
