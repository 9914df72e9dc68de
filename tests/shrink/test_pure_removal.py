"""Pruning is pure channel removal: pruned model == original with the dropped q/k channels zeroed.

Zeroing the dropped rows of q_proj/k_proj and the dropped q/k conv channels makes those channels' post-
convolution activations exactly zero (conv of zeros, zero bias, SiLU(0) = 0), so the original model then
runs on the kept channels only, at its own readout scale dk^-1/2. The pruned model must give the same
logits (|Δ| ≤ 1e-4) with every other parameter bit-identical. fla's default dk'^-1/2 (the reference code's
behaviour, still offered as rescale="default") fails this, which the last assertion of each case shows.
"""
import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from analysis.data import corpus as data
from analysis.runtime.backend import observe_recurrences
from analysis.shrink.calibration import calibrate
from analysis.models.load import attention_layers, load_model
from analysis.shrink.prune import build_pruned, prune
from analysis.models.key_plan import plan_key_dims
from analysis.io.model_dir import save_model
from analysis.shrink.strategies import STRATEGIES
from analysis.shrink.strategies.base import Selection
from family_cases.text_lm import build_tiny
from helpers.selections import random_selections

TOL = 1e-4
QK = ("q_proj.weight", "k_proj.weight", "q_conv1d.weight", "k_conv1d.weight", "q_conv1d.bias", "k_conv1d.bias")


def zeroed_original(model, selections):
    """A copy of the original model whose dropped q/k channels are zero after the short convolution."""
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for attn, sel in zip(attention_layers(zeroed), selections):
            heads, dk = attn.num_heads, attn.head_k_dim
            keep = torch.zeros(heads, dk, dtype=torch.bool)
            keep.scatter_(1, sel.indices, True)
            dropped = (~keep).flatten()
            for module in (attn.q_proj, attn.k_proj, attn.q_conv1d, attn.k_conv1d):
                module.weight[dropped] = 0
                if module.bias is not None:
                    module.bias[dropped] = 0
    return zeroed


def post_conv_queries(model, ids):
    seen = []
    with torch.no_grad(), observe_recurrences(lambda r: seen.append(r.q_raw)):
        model(ids, use_cache=False)
    return seen


def assert_pure_removal(model, selections, ids, rescale="original", zeroed=None):
    """max |Δlogit| between the pruned model and the zeroed original, after checking every parameter."""
    pruned = build_pruned(model, selections, rescale)
    zeroed = zeroed_original(model, selections) if zeroed is None else zeroed
    # The zeroing really silences the dropped channels where the recurrence reads them.
    for sel, q in zip(selections, post_conv_queries(zeroed, ids)):
        kept = torch.zeros(q.shape[-2:], dtype=torch.bool).scatter_(1, sel.indices, True)
        assert q[..., ~kept].abs().max() == 0
    # Every parameter is the original one: q/k sliced to the kept channels, all others bit-identical.
    original, new = model.state_dict(), pruned.state_dict()
    assert original.keys() == new.keys()
    for name, tensor in new.items():
        if name.rsplit("attn.", 1)[-1] in QK:
            layer = int(name.split(".")[2])
            heads = attention_layers(model)[layer].num_heads
            rows = (torch.arange(heads)[:, None] * original[name].shape[0] // heads + selections[layer].indices)
            assert torch.equal(tensor, original[name][rows.flatten()]), name
        else:
            assert torch.equal(tensor, original[name]), name
    with torch.no_grad():
        return (pruned(ids).logits - zeroed(ids).logits).abs().max().item()


AXIS_ALIGNED = [name for name, s in STRATEGIES.items() if s.axis_aligned]


@pytest.fixture(scope="module", params=["delta_net", "gated_deltanet"])
def tiny(request):
    model = build_tiny(request.param, expand_k=2.0) if request.param == "delta_net" else build_tiny(request.param)
    return model, calibrate(model, data.load_tokenizer(), n_sequences=3, seq_len=64)


@pytest.mark.parametrize("name", AXIS_ALIGNED)
@pytest.mark.parametrize("ratios", [[0.5, 0.5], [0.25, 0.75]], ids=["uniform", "per-layer"])
def test_tiny_models_every_axis_aligned_strategy(tiny, name, ratios):
    model, calib = tiny
    ids = torch.randint(0, 8192, (2, 80), generator=torch.Generator().manual_seed(3))
    dims = plan_key_dims(model, ratios=ratios)
    selections = STRATEGIES[name].select(model, calib, dims)
    assert assert_pure_removal(model, selections, ids) <= TOL


@pytest.fixture(scope="module", params=["deltanet-small", "gated-deltanet-small"])
def bundled(request):
    model = load_model(request.param, device="cpu")
    tok = data.load_tokenizer()
    ids = data.token_windows(data.encode(data.load_text("test")[:20000], tok), 72, max_windows=2)
    return model, ids


@pytest.mark.parametrize("ratios", ["0.5", "0.75", "per-layer"])
def test_bundled_models_are_the_original_with_channels_zeroed(bundled, ratios):
    model, ids = bundled
    per_layer = [0.25, 0.75, 0.5, 0.75]
    if ratios == "per-layer":
        selections = random_selections(model, plan_key_dims(model, ratios=per_layer))
    else:
        selections = STRATEGIES["l1"].select(model, None, plan_key_dims(model, ratio=float(ratios)))
    zeroed = zeroed_original(model, selections)
    assert assert_pure_removal(model, selections, ids, zeroed=zeroed) <= TOL
    # fla's default readout scale dk'^-1/2 (the old behaviour) is NOT channel removal.
    assert assert_pure_removal(model, selections, ids, rescale="default", zeroed=zeroed) > 100 * TOL


def test_bundled_drrqr_from_calibration(bundled):
    model, ids = bundled
    calib = calibrate(model, data.load_tokenizer(), n_sequences=2, seq_len=64)
    result = prune(model, "drrqr", plan_key_dims(model, ratios=[0.5, 0.75, 0.25, 0.75]), calib)
    assert result.model.config.readout_key_dims == [64] * 4
    assert assert_pure_removal(model, result.selections, ids) <= TOL


def test_pca_path_keeps_the_scale_too():
    """PCA is a rotation, not channel removal; with a coordinate projection (0/1 rows) it must reduce to it."""
    model = build_tiny("gated_deltanet")
    ids = torch.randint(0, 8192, (1, 70), generator=torch.Generator().manual_seed(5))
    selections = random_selections(model, [8, 20])
    eye = torch.eye(32)
    projections = [Selection(projection=torch.stack([eye[row] for row in s.indices])) for s in selections]
    with torch.no_grad():
        via_projection = build_pruned(model, projections)(ids).logits
        via_indices = build_pruned(model, selections)(ids).logits
    assert (via_projection - via_indices).abs().max() <= 1e-6


def test_pruning_a_pruned_model_keeps_the_first_scale(tmp_path):
    model = build_tiny("delta_net", expand_k=2.0)  # dk 64
    ids = torch.randint(0, 8192, (1, 70), generator=torch.Generator().manual_seed(6))
    first = build_pruned(model, random_selections(model, [48, 40]))
    second_sel = random_selections(first, [16, 24], seed=1)
    second = build_pruned(first, second_sel)
    assert second.config.readout_key_dims == [64, 64]
    # Composed index sets: channels of the original that survive both prunes.
    composed = [Selection(indices=torch.gather(a.indices, 1, b.indices))
                for a, b in zip(random_selections(model, [48, 40]), second_sel)]
    with torch.no_grad():
        delta = (second(ids).logits - zeroed_original(model, composed)(ids).logits).abs().max()
    assert delta <= TOL


@pytest.mark.parametrize("kind", ["delta_net", "gated_deltanet"])
def test_round_trip_and_old_saved_models_keep_their_behaviour(kind, tmp_path):
    model = build_tiny(kind)
    ids = torch.randint(0, 8192, (1, 70), generator=torch.Generator().manual_seed(7))
    selections = random_selections(model, [8, 16])
    with torch.no_grad():
        for rescale in ("original", "default"):
            pruned = build_pruned(model, selections, rescale)
            out = save_model(pruned, tmp_path / rescale)
            loaded = AutoModelForCausalLM.from_pretrained(out).eval()
            assert torch.equal(loaded(ids).logits, pruned(ids).logits)
            eps = [layer.attn.o_norm.eps for layer in loaded.model.layers]
            assert eps == ([1e-6 * 32 / 8, 1e-6 * 32 / 16] if rescale == "original" else [1e-6, 1e-6])
        # A model saved before `readout_key_dims` existed loads with its old (dk'^-1/2) behaviour.
        config = json.loads((tmp_path / "original" / "config.json").read_text())
        del config["readout_key_dims"]
        (tmp_path / "original" / "config.json").write_text(json.dumps(config))
        old = AutoModelForCausalLM.from_pretrained(tmp_path / "original").eval()
        assert old.config.readout_key_dims is None
        assert torch.equal(old(ids).logits, build_pruned(model, selections, "default")(ids).logits)
