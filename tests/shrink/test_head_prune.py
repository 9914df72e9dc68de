"""Issue 32: head plans, the grouped head choice, and every head strategy behind one interface.

- keepable counts and the grouped choice (every kept key head keeps the same number of value heads, the best total
  score wins) on hand-made scores;
- every registered head strategy: one score per value head per layer, finite, seeded where random, and the plan it
  makes prunes the tiny model;
- rank and norm scores against an independent computation (the kept states' singular values by numpy's SVD);
- the measured score (one forward per head with its output zeroed) against building the head-pruned model and
  scoring it: the same Δ loss per sequence.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from family_cases import text_lm
from analysis.models.load import linear_layers
from analysis.shrink.heads.prune import HeadPlan, build_head_pruned, keepable_counts, plan_head_counts, select_heads
from analysis.shrink.heads.strategies import HEAD_STRATEGIES, get_head_strategy


class _Layer:
    def __init__(self, key_heads, value_heads):
        self.key_heads, self.value_heads = key_heads, value_heads


def test_keepable_counts_follow_the_grouping():
    assert keepable_counts(_Layer(4, 4)) == [1, 2, 3, 4]
    assert keepable_counts(_Layer(2, 4)) == [1, 2, 4]
    assert keepable_counts(_Layer(2, 8)) == [1, 2, 3, 4, 6, 8]


def test_grouped_choice_takes_the_best_expressible_total():
    # 2 key heads × 2 value heads; keeping 2: one per key head (0.9 + 0.5) beats both of key head 0 (0.9 + 0.1)
    chosen = select_heads(torch.tensor([0.9, 0.1, 0.5, 0.2]), 2, 2)
    assert chosen.value_heads.tolist() == [0, 2] and chosen.key_heads.tolist() == [0, 1]
    # ... and both of key head 1 when they are best together
    chosen = select_heads(torch.tensor([0.9, -5.0, 1.0, 1.0]), 2, 2)
    assert chosen.value_heads.tolist() == [2, 3] and chosen.key_heads.tolist() == [1]
    with pytest.raises(Exception, match="cannot be expressed"):
        select_heads(torch.tensor([1.0, 2.0, 3.0, 4.0]), 3, 2)


@pytest.fixture(scope="module")
def model():
    return text_lm.build_tiny("delta_net", num_heads=4)


@pytest.fixture(scope="module")
def calib(model):
    from analysis.shrink.calibration import calibrate
    ids = torch.randint(1, model.config.vocab_size, (4, 48), generator=torch.Generator().manual_seed(0))
    return calibrate(model, None, input_ids=ids, label="4×48 random ids")


def test_a_ratio_keeps_the_nearest_expressible_count(model):
    assert plan_head_counts(model, ratio=0.5) == [2, 2]
    assert plan_head_counts(model, ratio=0.0) == [4, 4]
    assert plan_head_counts(model, ratio=0.99) == [1, 1]      # never none


@pytest.mark.parametrize("name", list(HEAD_STRATEGIES))
def test_every_head_strategy_scores_and_prunes(model, calib, name):
    strategy = get_head_strategy(name)
    scores = strategy.scores(model, calib, seed=1)
    assert [s.shape for s in scores] == [(layer.value_heads,) for layer in linear_layers(model)]
    assert all(torch.isfinite(s).all() for s in scores)
    assert all(torch.equal(a, b) for a, b in zip(scores, strategy.scores(model, calib, seed=1)))
    from analysis.shrink.heads.prune import choose_heads
    chosen = choose_heads(model, HeadPlan(name, (2, 3)), calib, seed=1)
    assert [s.counts for s in chosen] == [(2, 2), (3, 3)]
    for s, sel in zip(scores, chosen):   # the kept heads are the best-scored ones (no grouping here)
        assert set(sel.value_heads.tolist()) == set(s.topk(len(sel.value_heads)).indices.tolist())
    assert build_head_pruned(model, chosen) is not model


def _numpy_statistics(model, ids):
    """Per layer, [H] mean log max(erank, 1) and mean log ‖S‖_F over the second-half positions, from the kept
    states' singular values by numpy."""
    from analysis.inspect.head_ranks import trajectory_positions
    from analysis.inspect.states import collect_states
    positions = trajectory_positions(ids.shape[1])
    trace = collect_states(model, ids, positions=positions, keep_states=True, compute_metrics=False)
    late = [i for i, p in enumerate(positions) if p >= ids.shape[1] / 2]
    out = []
    for layer in trace.layers:
        s = np.linalg.svd(layer.states[:, :, late].double().numpy(), compute_uv=False)   # [B, H, P, m]
        p = s / s.sum(-1, keepdims=True)
        erank = np.exp(-(p * np.log(np.where(p > 0, p, 1))).sum(-1))
        out.append((np.log(np.maximum(erank, 1)).mean((0, 2)), np.log(np.sqrt((s ** 2).sum(-1))).mean((0, 2))))
    return out


def test_rank_and_norm_scores_equal_numpy(model, calib):
    reference = _numpy_statistics(model, calib.input_ids)
    rank, norm = (get_head_strategy(n).scores(model, calib) for n in ("rank", "norm"))
    joint = get_head_strategy("rank-norm").scores(model, calib)
    for (log_erank, log_fro), r, n, j in zip(reference, rank, norm, joint):
        # states are float32 (eigvalsh of the Gram matrix in float64 inside the project): agree to 1e-4
        np.testing.assert_allclose(r.numpy(), -log_erank, atol=1e-4)
        np.testing.assert_allclose(n.numpy(), log_fro, atol=1e-4)
        z = lambda x: (x - x.mean()) / x.std()  # noqa: E731  (population std, as the strategy)
        np.testing.assert_allclose(j.numpy(), z(-log_erank) + z(log_fro), atol=1e-3)


def test_measured_scores_equal_the_pruned_models_loss(model, calib):
    from analysis.shrink.heads.prune import HeadSelection
    from analysis.shrink.heads.sensitivity import sequence_losses
    measured = get_head_strategy("measured").scores(model, calib)
    base = sequence_losses(model, calib.input_ids)
    layers = linear_layers(model)
    for index, layer in enumerate(layers):
        for h in (0, layer.value_heads - 1):
            kept = [torch.arange(l.value_heads) if i != index else torch.tensor([k for k in range(l.value_heads) if k != h])
                    for i, l in enumerate(layers)]
            pruned = build_head_pruned(model, [HeadSelection(k, k) for k in kept])
            delta = float((sequence_losses(pruned, calib.input_ids) - base).mean())
            assert math.isclose(float(measured[index][h]), delta, abs_tol=1e-5)


@pytest.mark.parametrize("strategy", ["l1", "pca"])
def test_heads_and_key_dims_are_one_build_equal_to_two(model, calib, strategy, monkeypatch):
    """Issue 43: a "both" prune builds one model (the head-pruned layout read on the meta device), bit for bit the
    model the earlier two builds made (heads removed, then the kept key heads' channels of that model)."""
    import analysis.shrink.heads.prune as heads_prune
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.prune import build_pruned
    plan = HeadPlan("rank-norm", tuple(plan_head_counts(model, ratio=0.5)))
    import analysis.shrink.prune as channel_prune
    builds, real = [], channel_prune.rebuilt
    for module in (heads_prune, channel_prune):   # every model build goes through rebuilt
        monkeypatch.setattr(module, "rebuilt", lambda *a: builds.append(1) or real(*a))
    result = heads_prune.prune_with_heads(model, strategy, plan_key_dims(model, ratio=0.5), plan, calib, seed=1)
    assert len(builds) == 1
    monkeypatch.undo()
    two = build_pruned(build_head_pruned(model, heads_prune.choose_heads(model, plan, calib, 1)), result.selections)
    one, other = result.model.state_dict(), two.state_dict()
    assert one.keys() == other.keys() and all(torch.equal(one[k], other[k]) for k in one)
    assert result.model.config.to_dict() == two.config.to_dict()
    assert result.info["heads"]["head_counts"] == [[2, 2], [2, 2]] and result.info["label"] != "no key channels removed"
