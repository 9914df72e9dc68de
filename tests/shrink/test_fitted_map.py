"""Issue 40 item 2: one fitted map for the eye, the prediction and the allocator — weighted isotonic regression per
layer (≥ 0, 0 at ρ = 0, non-decreasing in ρ) against a brute-force least-squares check, and the allocator's plan
has the least prediction among random plans at its bytes."""
import itertools
import json
import math
import random

import numpy
import pytest

from analysis.shrink import fitted_map, predict
from analysis.shrink.allocate import allocate, layer_cost, recommend
from analysis.shrink.sensitivity import RESULTS_DIR

SAMPLES = ("gated-deltanet-small", "deltanet-small", "granite-h-small")


def shipped(name):
    return json.loads((RESULTS_DIR / f"sensitivity-{name}-l1.json").read_text())


def test_isotonic_fit_is_the_weighted_least_squares_monotone_curve_from_zero():
    """Against brute force: among non-decreasing curves from 0 on a fine grid of levels, none has a smaller
    weighted squared error."""
    rng = random.Random(3)
    for _ in range(40):
        cells = [(r, rng.uniform(-0.01, 0.03), rng.uniform(1e-4, 3e-3)) for r in (0.25, 0.5, 0.75, 0.875)]
        fit = fitted_map.fit_layer(cells)
        values = [f for f, _ in fit]
        assert min(values) >= 0 and all(a <= b + 1e-15 for a, b in zip(values, values[1:]))
        w = [1 / c[2] ** 2 for c in cells]
        err = sum(wi * (f - c[1]) ** 2 for wi, f, c in zip(w, values, cells))
        levels = sorted({0.0, *numpy.linspace(0, 0.03, 61).tolist(), *values})
        for combo in itertools.combinations_with_replacement(levels[::3], 4):
            assert sum(wi * (f - c[1]) ** 2 for wi, f, c in zip(w, combo, cells)) >= err - 1e-12


def test_a_rising_layer_is_left_as_measured_and_a_pooled_cell_gets_the_pools_se():
    cells = [(0.25, 0.001, 1e-3), (0.5, 0.004, 1e-3), (0.75, 0.002, 1e-3), (0.875, 0.02, 2e-3)]
    fit = fitted_map.fit_layer(cells)
    assert fit[0] == (0.001, pytest.approx(1e-3)) and fit[3] == (0.02, pytest.approx(2e-3))
    assert fit[1][0] == fit[2][0] == pytest.approx(0.003) and fit[1][1] == pytest.approx(1e-3 / math.sqrt(2))
    gain = fitted_map.fit_layer([(0.5, -0.002, 1e-3), (0.875, 0.001, 1e-3)])
    assert gain[0][0] == 0.0 and gain[1][0] == 0.001                        # a one-layer "gain" fits to 0


@pytest.mark.parametrize("name", SAMPLES)
def test_the_fitted_shipped_maps_have_the_physics(name):
    smap = shipped(name)
    fit = fitted_map.fitted(smap)
    assert fitted_map.fitted(fit) is fit and fitted_map.raw(fit)["points"] == smap["points"]
    for layer, points in enumerate(predict.layer_points(smap)):
        dk = smap["layers"][layer]["head_k_dim"]
        curve = [predict.layer_loss(points, dk, d)["loss"] for d in range(dk, points[-1][3] - 1, -1)]
        assert curve[0] == 0.0 and min(curve) >= 0
        assert all(a <= b + 1e-12 for a, b in zip(curve, curve[1:])), layer   # non-decreasing in ρ, between cells too


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("mean_ratio", [0.25, 0.5, 0.75])
def test_the_allocators_plan_has_the_least_prediction_among_random_plans_at_its_bytes(name, mean_ratio):
    smap = shipped(name)
    alloc = allocate(smap, mean_ratio=mean_ratio)
    best = predict.predict(smap, alloc.dims)["predicted_loss"]
    assert best == pytest.approx(alloc.objective_loss, abs=1e-12)          # it minimised what the page shows
    rows, rng, tried = smap["layers"], random.Random(11), 0
    smallest = [p[-1][3] for p in predict.layer_points(smap)]
    while tried < 1000:
        dims = [rng.randint(lo, row["head_k_dim"]) for lo, row in zip(smallest, rows)]
        if sum(layer_cost(row, d, "state_bytes") for row, d in zip(rows, dims)) > alloc.budget:
            continue
        tried += 1
        assert predict.predict(smap, dims)["predicted_loss"] >= best - 1e-12, dims


def test_the_recommendation_is_uniform_unless_the_map_sees_a_gain_beyond_noise():
    smap = shipped("gated-deltanet-small")
    rec = recommend(smap, 0.5)
    diff = rec["versus_uniform"]
    if rec["plan"] == "uniform":
        assert rec["ratios"] == [0.5] * 4 and "as good as anything the map can find here" in rec["reason"]
        assert diff["delta"] >= -2 * diff["sigma"]
    else:
        assert diff["delta"] < -2 * diff["sigma"] and rec["head_k_dims"] == rec["allocator"]["head_k_dims"]
    flat = {**smap, "points": [{**p, "loss": 0.001 * p["ratio"]} for p in smap["points"]]}
    assert recommend(flat, 0.5)["plan"] == "uniform"                         # nothing to choose between layers
    steep = {**smap, "points": [{**p, "loss": (0.2 if p["layer"] == 0 else 0.0001) * p["ratio"], "se": 1e-4}
                                for p in smap["points"]]}
    got = recommend(steep, 0.5)                                              # layer 0 fragile: spare it
    assert got["plan"] == "sensitivity-allocated" and got["head_k_dims"][0] == 64
