"""Issue 32: plans at an equal state budget (dk, heads, mixed) keep the fraction of the state they claim."""
from __future__ import annotations

import pytest

from family_cases import text_lm
from family_cases.qwen3_5 import CASE as QWEN
from analysis.models.load import describe
from analysis.shrink.budget_plans import budget_plan
from analysis.shrink.heads.prune import keepable_counts


@pytest.fixture(scope="module")
def qwen():
    return QWEN.make_model()   # 3 GDN layers, 2 key heads × 2 value heads each, dk 16, dv 8


@pytest.mark.parametrize("kind", ["dk", "heads", "mixed"])
@pytest.mark.parametrize("fraction", [0.75, 0.5, 0.25])
def test_a_plan_keeps_what_it_says(qwen, kind, fraction):
    from analysis.models.load import linear_layers
    plan = budget_plan(qwen, kind, fraction)
    layers = linear_layers(qwen)
    kept = sum(n * d * l.value_dim for l, n, d in zip(layers, plan["head_counts"], plan["dims"]))
    assert plan["state_fraction"] == pytest.approx(kept / describe(qwen).state_bytes_per_sequence * 4)
    assert all(n in keepable_counts(l) for l, n in zip(layers, plan["head_counts"]))
    if kind == "dk":
        assert plan["head_counts"] == [4, 4, 4] and plan["state_fraction"] == pytest.approx(fraction, abs=1 / 16)
    if kind == "heads":
        assert plan["dims"] == [16, 16, 16]


def test_heads_mix_counts_where_no_uniform_count_is_expressible(qwen):
    # 4 value heads on 2 key heads cannot keep 3 (keepable: 1, 2, 4); 75 % of 3 layers × 4 heads is 9 heads: 4 + 4 + 1
    plan = budget_plan(qwen, "heads", 0.75)
    assert sorted(plan["head_counts"]) == [1, 4, 4] and plan["state_fraction"] == pytest.approx(0.75)


def test_budget_sweep_pairs_every_point_with_the_baseline(sweep_cache):
    from analysis.data import corpus
    from analysis.evaluate.measure import Evaluation
    from analysis.runs.budget_sweep import budget_sweep
    from analysis.shrink.calibration import CalibrationSettings
    model = text_lm.build_tiny("delta_net", num_heads=4)
    grid = ("both", ["l1"], ["random"], [0.5], Evaluation(context=64, max_tokens=600), CalibrationSettings(2, 64))
    points = list(budget_sweep(model, corpus.load_tokenizer(), *grid))
    assert [(p["kind"], p["strategy"], p["head_strategy"]) for p in points] == [
        ("unpruned", "-", "-"), ("dk", "l1", "-"), ("heads", "-", "random"), ("mixed", "l1", "random")]
    base = points[0]
    for p in points[1:]:
        d = [b - a for a, b in zip(base["window_losses"], p["window_losses"])]
        assert p["windows"] == len(d) == len(base["window_losses"]) > 1 and p["delta_log_ppl"] == pytest.approx(sum(d) / len(d))
        assert p["state_fraction"] == pytest.approx(p["state_bytes_per_sequence"] / base["state_bytes_per_sequence"])
    again = list(budget_sweep(model, corpus.load_tokenizer(), *grid))
    assert all(p["cached"] for p in again) and [p["perplexity"] for p in again] == [p["perplexity"] for p in points]
