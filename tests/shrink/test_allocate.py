"""The allocator: exact against brute force, budgets it cannot meet, one-layer models, a deliberately fragile layer."""
import itertools
import math
import random

import numpy
import pytest
import torch

from analysis.shrink.allocate import (allocate, candidates, choose, knapsack, options, paired_difference, uniform_budget,
                               verify)
from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.shrink.sensitivity import MapSettings, compute_map


def _brute_force(costs, losses, budget):
    best = None
    for picks in itertools.product(*[range(len(c)) for c in costs]):
        if sum(c[i] for c, i in zip(costs, picks)) <= budget:
            loss = sum(l[i] for l, i in zip(losses, picks))
            best = loss if best is None else min(best, loss)
    return best


def test_knapsack_is_exact_against_brute_force():
    rng = random.Random(7)
    for _ in range(300):
        layers = rng.randint(1, 4)
        costs = [[rng.choice([1, 2, 3, 4, 6, 8]) * 1024 for _ in range(rng.randint(1, 4))] for _ in range(layers)]
        losses = [[rng.uniform(-0.1, 1.0) for _ in c] for c in costs]
        budget = rng.randint(0, sum(max(c) for c in costs)) * 1024 // rng.choice([1, 2, 3])
        expected = _brute_force(costs, losses, budget)
        got = knapsack(costs, losses, budget)
        if expected is None:
            assert got is None
            continue
        picks, loss = got
        assert sum(c[i] for c, i in zip(costs, picks)) <= budget
        assert math.isclose(loss, sum(l[i] for l, i in zip(losses, picks)), abs_tol=1e-12)
        assert math.isclose(loss, expected, abs_tol=1e-12)


def _map(losses_by_layer, ratios=(0.25, 0.5, 0.75), dk=64, metric="ppl"):
    """A hand-written map: layer l at ratios[j] has loss losses_by_layer[l][j]."""
    layers = [{"layer": l, "head_k_dim": dk, "heads": 2, "value_dim": 16, "state_bytes": 2 * dk * 16 * 4,
               "rank_utilization": 0.1} for l in range(len(losses_by_layer))]
    points = [{"layer": l, "ratio": r, "head_k_dim": math.floor(dk * (1 - r) + 1e-9), "value": 10 * math.exp(x),
               "loss": x} for l, row in enumerate(losses_by_layer) for r, x in zip(ratios, row)]
    return {"kind": "sensitivity-map", "strategy": "l1", "metric": metric, "baseline": 10.0, "layers": layers,
            "points": points, "settings": {"ratios": list(ratios)}}


def test_allocation_spends_the_uniform_state_and_prefers_the_insensitive_layer():
    smap = _map([[0.5, 1.0, 2.0], [0.0, 0.01, 0.02]])
    alloc = allocate(smap, mean_ratio=0.375)
    assert alloc.budget == uniform_budget(smap, 0.375, None, "state_bytes") == 2 * 2 * 40 * 16 * 4
    assert alloc.dims == [64, 16] and alloc.ratios == [0.0, 0.75]
    assert alloc.cost <= alloc.budget
    assert math.isclose(alloc.predicted_loss, 0.02) and math.isclose(alloc.predicted_value, 10 * math.exp(0.02))


def test_the_allocator_charges_the_fitted_map_zero_at_the_full_dim_and_never_falling():
    """Issue 40: the allocator reads the fitted map (weighted isotonic, 0 at ρ = 0), at every dim from the smallest
    measured one to the full dim; a noisy dip is pooled with its neighbour and one-layer "gains" fit to 0."""
    smap = _map([[0.02, 0.01, 0.05], [-0.001, -0.003, 0.002]])  # a noisy dip, and one-layer "gains"
    [a, b] = options(smap)
    assert [o.dim for o in a] == list(range(64, 15, -1))
    at, bt = {o.dim: o for o in a}, {o.dim: o for o in b}
    assert [at[d].loss for d in (64, 48, 32, 16)] == pytest.approx([0.0, 0.015, 0.015, 0.05])  # equal weights: pooled
    assert [bt[d].loss for d in (64, 48, 32, 16)] == pytest.approx([0.0, 0.0, 0.0, 0.002])
    assert [bt[d].measured for d in (48, 32, 16)] == [-0.001, -0.003, 0.002]      # the raw map is kept alongside
    for layer in (a, b):
        losses = [o.loss for o in layer]                                          # ordered by falling dim
        assert all(x <= y + 1e-15 for x, y in zip(losses, losses[1:])) and min(losses) >= 0


def test_allocation_spends_the_whole_budget_instead_of_buying_a_negative_loss():
    """A layer measured slightly 'better than unpruned' (noise) used to be pruned hard, leaving bytes unused."""
    smap = _map([[0.01, 0.02, 0.05], [0.0, -0.001, -0.003]])
    alloc = allocate(smap, mean_ratio=0.25)                    # 2 × 48 channels of state
    assert alloc.cost == alloc.budget
    assert alloc.dims == [64, 32] and alloc.objective_loss == 0.0     # the fitted map: that layer's gains are 0
    assert alloc.predicted_loss == 0.0                                # the prediction shown is the same number


def _plans(smap, target):
    return {p["name"]: p for p in candidates(smap, allocate(smap, mean_ratio=target), mean_ratio=target)}


def test_candidates_are_the_knapsack_uniform_and_rank_plans_at_one_budget():
    smap = _map([[0.5, 1.0, 2.0], [0.0, 0.01, 0.02]])
    smap["layers"][0]["rank_utilization"], smap["layers"][1]["rank_utilization"] = 0.9, 0.1
    plans = _plans(smap, 0.375)
    assert set(plans) == {"sensitivity-allocated", "uniform", "rank-suggested"}
    budget = uniform_budget(smap, 0.375, None, "state_bytes")
    assert all(p["cost"] <= budget for p in plans.values()) and plans["uniform"]["cost"] == budget
    # 40 lies between the measured 48 (ρ 0.25) and 32 (ρ 0.5): the monotone cubic through (0, 0) and the cells
    from scipy.interpolate import PchipInterpolator
    x = [0.0, 0.25, 0.5, 0.75]
    expected = PchipInterpolator(x, [0, 0.5, 1.0, 2.0])(0.375) + PchipInterpolator(x, [0, 0.0, 0.01, 0.02])(0.375)
    assert plans["uniform"]["dims"] == [40, 40] and plans["uniform"]["predicted_loss"] == pytest.approx(expected)
    assert plans["sensitivity-allocated"]["dims"] == [64, 16]


def test_choose_keeps_the_plan_that_measures_best_and_says_why():
    smap = _map([[0.5, 1.0, 2.0], [0.0, 0.01, 0.02]])
    plans = list(_plans(smap, 0.5).values())
    calls = []

    def fake(measured):
        def evaluate(plan):
            calls.append(tuple(plan["dims"]))
            return {"value": 10 * math.exp(measured[tuple(plan["dims"])]), "loss": measured[tuple(plan["dims"])]}
        return evaluate
    knap, uniform = tuple(plans[0]["dims"]), tuple(plans[1]["dims"])
    assert knap != uniform
    won = choose(plans, fake({knap: 0.01, uniform: 0.02}))
    assert won["winner"] == "sensitivity-allocated" and won["dims"] == list(knap)
    assert "+0.0100 against uniform's +0.0200" in won["reason"]
    assert [c["measured_loss"] for c in won["candidates"]][:2] == [0.01, 0.02]
    lost = choose(plans, fake({knap: 0.03, uniform: 0.02}))
    assert lost["winner"] == "uniform" and lost["ratios"] == [0.5, 0.5]
    assert lost["reason"].startswith("the map found nothing better than uniform")
    calls.clear()
    same = choose([plans[0], {**plans[1], "dims": list(knap)}], fake({knap: 0.01}))
    assert calls == [knap] and same["winner"] == "uniform"       # measured once; the tie goes to uniform


def test_tile_rounding_keeps_only_tile_multiples():
    smap = _map([[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]], ratios=(0.25, 0.375, 0.5))  # dims 48, 40, 32
    dims = {o.dim for layer in options(smap, round_to=16) for o in layer}
    assert dims == {64, 48, 32}
    tiles = allocate(_map([[0.1, 0.2, 0.3], [0.0, 0.0, 0.0]], dk=128, ratios=(0.25, 0.5, 0.75)), tiles=6)
    assert tiles.unit == "tiles" and tiles.cost <= 6 and tiles.dims[0] == 128 and tiles.predicted_loss == 0


def test_a_budget_no_allocation_meets_is_one_sentence_with_the_range():
    smap = _map([[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]])
    low, high = 2 * 2 * 16 * 16 * 4, 2 * 2 * 64 * 16 * 4
    for kwargs in ({"state_bytes": low - 1}, {"state_bytes": high + 1}, {"tiles": 1}):
        with pytest.raises(AnalysisError) as err:
            allocate(smap, **kwargs)
        msg = str(err.value)
        assert msg.count(". ") == 0 and msg.endswith(".")
    with pytest.raises(AnalysisError, match=f"{low:,} .*{high:,}"):
        allocate(smap, state_bytes=low - 1)
    with pytest.raises(AnalysisError, match="mean ratio between 0 and 0.750"):
        allocate(smap, mean_ratio=0.9)
    with pytest.raises(AnalysisError, match="exactly one target"):
        allocate(smap, mean_ratio=0.5, tiles=3)


def test_one_layer_model_has_nothing_to_allocate():
    with pytest.raises(AnalysisError, match="nothing to allocate"):
        allocate(_map([[0.1, 0.2, 0.3]]), mean_ratio=0.5)


def test_allocator_picks_the_insensitive_layer_of_a_model_with_a_fragile_layer(tmp_path, monkeypatch):
    """deltanet-recall stores its pairs in layer 0's state (fragile); layer 1 tolerates pruning. A copy with
    layer 1's readout switched off (o_proj = 0) makes that layer exactly free to prune."""
    from analysis.models import load as models
    from analysis.shrink.sensitivity import recall_task
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path)
    model = models.load_model("deltanet-recall", device="cpu")
    task = recall_task(model)
    s = MapSettings("l1", (0.25, 0.5, 0.875), metric="recall", recall_sequences=32, calib_sequences=8)
    smap = compute_map(model, None, s, task)
    loss = {(p["layer"], p["ratio"]): p["loss"] for p in smap["points"]}
    assert loss[(0, 0.875)] > 0.2 > loss[(1, 0.875)]          # the fragile layer is found
    alloc = allocate(smap, mean_ratio=0.5)
    assert alloc.ratios[1] == 0.875 and alloc.ratios[0] < 0.5      # layer 1 takes the pruning
    uniform = verify(model, None, smap, allocate(_only_ratio(smap, 0.5), mean_ratio=0.5), task)
    check = verify(model, None, smap, alloc, task)
    assert check["measured_value"] >= uniform["measured_value"]
    assert abs(check["error"]) < 0.05                          # additive model close on this map

    free = models.load_model("deltanet-recall", device="cpu")
    with torch.no_grad():
        free.model.layers[1].attn.o_proj.weight.zero_()
    smap = compute_map(free, None, s, task)
    assert all(p["loss"] == 0 for p in smap["points"] if p["layer"] == 1)
    alloc = allocate(smap, mean_ratio=0.4375)                  # 36 of 64 channels kept on average
    assert alloc.ratios == [0.0, 0.875]
    assert verify(free, None, smap, alloc, task)["measured_loss"] == 0 == alloc.predicted_loss


def _only_ratio(smap, ratio):
    """The same map restricted to one ratio, so the 'allocation' is the uniform plan."""
    return {**smap, "points": [p for p in smap["points"] if p["ratio"] == ratio]}


def test_choose_keeps_uniform_unless_a_plan_wins_by_more_than_the_paired_noise():
    smap = _map([[0.5, 1.0, 2.0], [0.0, 0.01, 0.02]])
    plans = list(_plans(smap, 0.5).values())
    knap, uniform = tuple(plans[0]["dims"]), tuple(plans[1]["dims"])
    base = [0.1 * i for i in range(16)]

    def fake(shift, spread):
        """The knapsack plan's windows differ from uniform's by `shift` ± alternating `spread`."""
        def evaluate(plan):
            w = base if tuple(plan["dims"]) != knap else [x + shift + spread * (-1) ** i for i, x in enumerate(base)]
            return {"value": 0.0, "loss": sum(w) / len(w), "windows": w}
        return evaluate
    noisy = choose(plans, fake(-0.01, 0.2))       # better on average, but well inside the window-to-window noise
    assert noisy["winner"] == "uniform" and "within noise" in noisy["reason"]
    knap_row = next(c for c in noisy["candidates"] if c["name"] == "sensitivity-allocated")
    assert knap_row["paired_vs_uniform"]["windows"] == 16
    assert abs(knap_row["paired_vs_uniform"]["delta_log_ppl"] + 0.01) < 1e-12
    clear = choose(plans, fake(-0.05, 0.01))      # better by far more than 2 standard errors
    assert clear["winner"] == "sensitivity-allocated" and "paired difference -0.0500" in clear["reason"]
    assert uniform != knap


def test_paired_difference_matches_a_direct_computation():
    a, b = [1.0, 2.0, 4.0, 3.0], [1.5, 2.0, 3.0, 3.5]
    d = numpy.array(b) - numpy.array(a)
    got = paired_difference(a, b)
    assert got["delta_log_ppl"] == pytest.approx(d.mean())
    assert got["se"] == pytest.approx(d.std(ddof=1) / len(d) ** 0.5)


def test_choose_plan_measures_an_allocation_equal_to_uniform_once_and_names_its_steps(monkeypatch, tmp_path):
    """Issue 20: Verify and choose measured uniform twice when the allocation equalled it. Issue 40: once on the
    choice tokens, once on held-out tokens, and the answer is the held-out one."""
    import analysis.shrink.allocate
    import analysis.shrink.stretch_measure
    from analysis.data import corpus as data
    from family_cases.text_lm import build_tiny
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "sweeps")
    pruned, steps, starts = [], [], []
    real = analysis.shrink.stretch_measure.prune_then_measure
    monkeypatch.setattr(analysis.shrink.stretch_measure, "prune_then_measure", lambda model, tok, strategy, dims, c,
                        evaluation, **k: (pruned.append(list(dims)), starts.append((evaluation.split, evaluation.start)),
                                          real(model, tok, strategy, dims, c, evaluation, **k))[2])
    s = MapSettings("l1", (0.5,), eval_tokens=128, context=64, calib_sequences=2, calib_tokens=64)
    same = {"ratios": [0.5, 0.5], "dims": [16, 16], "predicted_loss": None, "cost": 1}
    plans = [{"name": "sensitivity-allocated", **same}, {"name": "uniform", **same}]
    got = analysis.shrink.allocate.choose_plan(build_tiny("delta_net"), data.load_tokenizer(), {"settings": s.as_dict()},
                                               plans, "l1", progress=lambda f, text: steps.append(text))
    assert pruned == [[16, 16], [16, 16]] and got["winner"] == "uniform"
    assert starts == [("validation", 129), ("test", 0)]      # choice tokens right after the map's; then held out
    assert [c["same_as"] for c in got["candidates"]] == ["sensitivity-allocated", "sensitivity-allocated"]
    assert steps == ["measuring the unpruned model on the choice tokens…",
                     "pruning the sensitivity-allocated plan and measuring it on the choice tokens (1 of 1)…",
                     "measuring the chosen plan and uniform on held-out text…"]
    held = got["held_out"]
    assert held["recommended"] == "uniform" and "uniform is as good as anything the map can find here" in held["sentence"]
    assert held["stretch"] == {"role": "held-out", "split": "test", "start": 0, "tokens": 512, "context": 64}
    assert got["choice_tokens"]["role"] == "choice" and "choice tokens:" in got["measure"]
    # the plan history shows the held-out answer as its own group (one point: the chosen plan is uniform)
    from analysis.shrink import plan_points
    for c in got["candidates"]:
        c["state_bytes"] = 4096
    points = plan_points.from_choice({"choice": got, "metric": "ppl", "strategy": "l1"}, "verify 1")
    answer = [p for p in points if p["measure"] == held["measure"]]
    assert [p["label"] for p in answer] == ["verify 1: uniform, held-out"] and points[-1]["measure"] == got["measure"]
    assert math.log1p(answer[0]["delta"]) == pytest.approx(held["uniform"]["delta"], rel=1e-9, abs=1e-12)
