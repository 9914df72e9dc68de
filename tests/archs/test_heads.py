"""Issue 32: head pruning is pure removal in the model types beyond the family cases (test_families.py runs every
family case): the other Mamba-2 mixers (Falcon-H1 with and without its grouped norm), Qwen3-Next's interleaved
q|k|v|z projection, Qwen3.5-MoE and OLMo-hybrid. Per type: a head prune with per-layer counts, and a head + key-dim
prune, equal the original with the removed heads' outputs zeroed (and, for the kept key heads, the dropped q/k
channels zeroed), within 1e-4; the saved model loads back to the same logits; a second prune of a head-pruned
model keeps counting heads from the original.
"""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from family_cases import fewer_heads, heads_zeroed_logits, logits
from family_cases.mamba2 import make_config, make_model
from family_cases.qwen3_5 import make_sibling

ATOL = 1e-4


def _falcon_with_norm():
    import analysis  # noqa: F401
    config = make_config("falcon_h1")
    config.mamba_rms_norm = True   # the grouped gated RMSNorm (the family case runs without it)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).float().eval()


BUILDERS = {**{t: (lambda t=t: make_model(t)) for t in ("mamba2", "granitemoehybrid", "falcon_h1", "bamba", "zamba2")},
            "falcon_h1+norm": _falcon_with_norm,
            **{k: (lambda k=k: make_sibling(k)) for k in ("qwen3_next", "qwen3_5_moe_text", "olmo_hybrid")}}


def _ids(model, seed=0):
    return torch.randint(1, model.config.vocab_size, (2, 19), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_head_prune_equals_zeroed_heads(kind, tmp_path):
    from analysis.shrink.heads.prune import HeadPlan, prune_with_heads
    from analysis.models.key_plan import plan_key_dims
    from analysis.io.model_dir import save_model
    model = BUILDERS[kind]()
    ids = _ids(model)
    result = prune_with_heads(model, None, plan_key_dims(model, ratio=0.0), HeadPlan("random", tuple(fewer_heads(model))),
                              seed=1)
    kept = result.info["heads"]["kept_value_heads"]
    got = logits(result.model, ids)
    assert (got - heads_zeroed_logits(model, ids, kept)).abs().max() <= ATOL
    assert (got - logits(model, ids)).abs().max() > ATOL
    loaded = AutoModelForCausalLM.from_pretrained(save_model(result.model, tmp_path / "p")).eval()
    assert torch.equal(logits(loaded, ids), got)
    if kind not in ("granitemoehybrid", "qwen3_next"):
        return
    # a second head prune of the head-pruned model (grouped norm; interleaved rows): counts kept from the original
    again = prune_with_heads(result.model, None, plan_key_dims(result.model, ratio=0.0),
                             HeadPlan("random", tuple(fewer_heads(result.model))), seed=2)
    assert again.info["heads"]["original_head_counts"] == result.info["heads"]["original_head_counts"]
    kept_twice = [[k[i] for i in k2] for k, k2 in zip(kept, again.info["heads"]["kept_value_heads"])]
    assert (logits(again.model, ids) - heads_zeroed_logits(model, ids, kept_twice)).abs().max() <= ATOL


@pytest.mark.parametrize("kind", ["qwen3_next", "granitemoehybrid"])
def test_heads_and_key_dims_together(kind):
    """Interleaved fused rows (Qwen3-Next) and grouped B/C (Granite-H): heads removed, then the kept key heads'
    channels chosen on the original model; the reference zeroes both."""
    from analysis.archs import adapter_for
    from analysis.models.load import linear_layers
    from analysis.shrink.heads.prune import HeadPlan, prune_with_heads
    from analysis.models.key_plan import plan_key_dims
    model = BUILDERS[kind]()
    ids = _ids(model, seed=3)
    result = prune_with_heads(model, "l1", plan_key_dims(model, ratio=0.5), HeadPlan("random", tuple(fewer_heads(model))),
                              seed=4)
    reference = _zero_channels(model, adapter_for(model), linear_layers(model), result)
    got = logits(result.model, ids)
    assert (got - heads_zeroed_logits(reference, ids, result.info["heads"]["kept_value_heads"])).abs().max() <= ATOL


def _zero_channels(model, adapter, layers, result):
    """A copy of `model` whose kept key heads' dropped q/k channels (result.selections) are zero in every q/k row
    block the adapter names."""
    import copy

    from analysis.models.load import linear_layers
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for layer, copied, sel, kept in zip(layers, linear_layers(zeroed), result.selections,
                                            result.info["heads"]["kept_key_heads"]):
            module = copied.module
            for rows in adapter.channel_rows(module):
                if rows.role not in ("q", "k"):
                    continue
                stride = rows.head_stride or layer.key_dim
                for slot, h in enumerate(kept):
                    dropped = [i for i in range(layer.key_dim) if i not in set(sel.indices[slot].tolist())]
                    module.get_parameter(rows.param)[[rows.start + h * stride + i for i in dropped]] = 0
    return zeroed
