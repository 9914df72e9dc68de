"""transformers' Kimi Linear (KDA + MLA) through the kimi_linear adapter: CPU routing against fla's naive KDA,
cached decode, the observer, pure pruning (pruned_kimi_linear), PCA refused, and its hub-layout checkpoints."""
from __future__ import annotations

import copy
import json

import pytest
import torch

import analysis  # noqa: F401
from analysis.archs import adapter_for
from analysis.archs.kimi_linear import ADAPTER
from analysis.archs.kimi_linear.routing import ENTRY_POINTS
from analysis.runtime.backend import observe_recurrences
from analysis.errors import AnalysisError
from family_cases import assert_close, logits
from family_cases.kimi_linear import CASE

import transformers.models.kimi_linear.modeling_kimi_linear as kimi_modeling
from transformers import AutoModelForCausalLM

T = 70  # more than one 64-token chunk


@pytest.fixture(scope="module")
def model():
    return CASE.make_model()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(3, 97, (2, T), generator=torch.Generator().manual_seed(1))




def _naive_kda(query, key, value, g, beta, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, **_):
    """fla's own token-loop KDA reference (fla/ops/kda/naive.py), with the l2norm transformers asks the kernel for."""
    from fla.ops.kda.naive import naive_recurrent_kda
    if use_qk_l2norm_in_kernel:
        query, key = (x / torch.sqrt(x.float().square().sum(-1, keepdim=True) + 1e-6) for x in (query, key))
    return naive_recurrent_kda(query.float(), key.float(), value.float(), g.float(), beta.float(),
                               initial_state=initial_state, output_final_state=output_final_state)


def test_registry_finds_the_adapter(model):
    assert adapter_for(model) is ADAPTER and adapter_for({"model_type": "pruned_kimi_linear"}) is ADAPTER
    assert [b.kind for b in ADAPTER.blocks(model)] == ["linear", "linear", "softmax", "linear"]
    layer = ADAPTER.linear_layers(model)[0]
    assert (ADAPTER.key_heads(layer), ADAPTER.value_heads(layer), ADAPTER.key_dim(layer), ADAPTER.value_dim(layer)) \
        == (2, 2, 16, 16)
    mla = ADAPTER.blocks(model)[2].module
    assert ADAPTER.softmax_cache_bytes(mla, 100, 2) == 100 * (16 + 8) * 2   # latent + shared rope key, one head


def test_unrouted_entry_point_reaches_fla_registry_then_the_safety_net(model, ids, monkeypatch):
    """transformers binds fla's Triton chunk_kda when fla is installed. Without the project's patch of transformers'
    global, a CPU call reaches fla's own dispatch, where the project's registered backend runs it (the same logits);
    with that backend taken out of fla's registry too, the safety net's sentence, never Triton's "0 active drivers"."""
    import inspect

    import fla.backends
    from fla.ops.kda import chunk_kda
    from analysis.runtime import fla_dispatch
    from analysis.runtime.triton_guard import UnroutedKernelError
    expected = logits(model, ids)
    routed = kimi_modeling.chunk_kimi_delta_attention
    monkeypatch.setattr(kimi_modeling, "chunk_kimi_delta_attention", routed.__wrapped__)
    assert_close(logits(model, ids), expected)
    monkeypatch.delitem(fla.backends._function_registries[inspect.unwrap(chunk_kda)]._backends,
                        fla_dispatch.BACKEND_TYPE)
    with pytest.raises(UnroutedKernelError, match="`chunk_kda` .*called by KimiLinearDeltaAttention"):
        logits(model, ids)


def test_routed_cpu_forward_equals_fla_naive_kda(model, ids, monkeypatch):
    routed = logits(model, ids)
    for name in ENTRY_POINTS:
        monkeypatch.setattr(kimi_modeling, name, _naive_kda)
    assert_close(routed, logits(model, ids))


def test_routed_cpu_forward_equals_transformers_torch_fallback(model, ids, tmp_path, monkeypatch):
    from helpers.routing import torch_fallback
    model.save_pretrained(tmp_path)  # the hub layout (transformers reverts its conversion), nothing of the project
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    routed = logits(loaded, ids)
    assert_close(routed, logits(model, ids), 1e-6)
    for name in ENTRY_POINTS:
        monkeypatch.setattr(kimi_modeling, name, torch_fallback(kimi_modeling, name))
    assert_close(routed, logits(loaded, ids))


def _decode_last(model, ids):
    with torch.no_grad():
        prefix = model(ids[:, :-1], use_cache=True)
        return model(ids[:, -1:], cache=prefix.cache, use_cache=True).logits[:, -1]


def test_cached_decode_takes_the_routed_recurrent_step(model, ids):
    assert_close(_decode_last(model, ids), logits(model, ids)[:, -1])


def test_observer_sees_per_channel_gates_per_head(model, ids):
    seen = []
    with observe_recurrences(seen.append):
        logits(model, ids)
    assert len(seen) == 3                                           # the three KDA blocks, not the MLA one
    r = seen[0]
    assert r.q_raw.shape == r.k_raw.shape == r.v.shape == (2, T, 2, 16)
    assert r.g.shape == (2, T, 2, 16) and bool((r.g < 0).all())      # one log-decay per head and key channel
    assert r.scale == 16 ** -0.5


def test_install_routing_is_idempotent():
    before = [getattr(kimi_modeling, n) for n in ENTRY_POINTS]
    ADAPTER.install_routing()
    assert [getattr(kimi_modeling, n) for n in ENTRY_POINTS] == before and all(f._analysis_routed for f in before)


# --- pruning ----------------------------------------------------------------------------------------------------

def _prune(model, dims, rescale="original", strategy="random"):
    from analysis.shrink.prune import prune
    return prune(model, strategy, dims, seed=5, rescale=rescale)


def _zeroed(model, selections):
    """The original with the dropped q/k projection rows zeroed (their post-conv q/k are then exactly zero)."""
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for layer, sel in zip(ADAPTER.linear_layers(zeroed), selections):
            dk = ADAPTER.key_dim(layer)
            keep = torch.zeros(2, dk, dtype=torch.bool).scatter_(1, sel.indices, True)
            dropped = [h * dk + i for h in range(2) for i in range(dk) if not keep[h, i]]
            layer.q_proj.weight[dropped] = 0
            layer.k_proj.weight[dropped] = 0
    return zeroed


@pytest.mark.parametrize("dims", [[8, 8, 8], [12, 4, 16]], ids=["uniform", "per-layer"])
def test_prune_equals_zeroed_channels_and_reloads(model, ids, dims, tmp_path):
    from analysis.io.model_dir import save_model
    result = _prune(model, dims)
    pruned = result.model
    assert pruned.config.model_type == "pruned_kimi_linear"       # KimiLinearConfig has one head dim for k and v
    assert [ADAPTER.key_dim(l) for l in ADAPTER.linear_layers(pruned)] == dims
    assert [ADAPTER.value_dim(l) for l in ADAPTER.linear_layers(pruned)] == [16, 16, 16]
    assert ADAPTER.readout_key_dims(pruned) == [16, 16, 16]
    assert_close(logits(pruned, ids), logits(_zeroed(model, result.selections), ids))
    assert_close(_decode_last(pruned, ids), logits(pruned, ids)[:, -1])  # the key-dim-aware layer's decode path
    loaded = AutoModelForCausalLM.from_pretrained(save_model(pruned, tmp_path / "p")).eval()
    assert torch.equal(logits(loaded, ids), logits(pruned, ids))


def test_decay_rows_follow_the_kept_key_channels(model):
    result = _prune(model, [8, 8, 8])
    for before, after, sel in zip(ADAPTER.linear_layers(model), ADAPTER.linear_layers(result.model),
                                  result.selections):
        rows = torch.cat([h * 16 + sel.indices[h] for h in range(2)])
        assert torch.equal(after.forget_gate.dt_bias, before.forget_gate.dt_bias[rows])
        assert torch.equal(after.forget_gate.f_b_proj.weight, before.forget_gate.f_b_proj.weight[rows])
        assert torch.equal(after.forget_gate.f_a_proj.weight, before.forget_gate.f_a_proj.weight)  # bottleneck kept


def test_default_readout_is_the_zeroed_original_with_scaled_norm_eps(model, ids):
    """Readout at dk'^-1/2 equals the zeroed original whose o_norm eps is scaled by dk'/dk (RMSNorm(c·o, eps) =
    RMSNorm(o, eps/c²), c² = dk/dk')."""
    result = _prune(model, [8, 8, 8], rescale="default")
    assert result.model.config.readout_key_dims is None
    zeroed = _zeroed(model, result.selections)
    for layer in ADAPTER.linear_layers(zeroed):
        layer.o_norm.variance_epsilon *= 8 / 16
    assert_close(logits(result.model, ids), logits(zeroed, ids))


def test_pca_and_bad_key_dims_are_one_sentence(model):
    with pytest.raises(AnalysisError, match="axis-aligned"):
        _prune(model, [8, 8, 8], strategy="pca")
    with pytest.raises(AnalysisError, match="3 KDA layers"):
        ADAPTER.pruned_model(model, [8, 8], None)
    with pytest.raises(AnalysisError, match="Key dim 0 is outside 1..256"):
        ADAPTER.pruned_model(model, [8, 0, 8], None)


# --- checkpoints ------------------------------------------------------------------------------------------------

def test_checkpoint_check_expects_the_hub_layout_save_pretrained_writes(model, tmp_path):
    """transformers saves kimi_linear in Moonshot's layout (q/k/v_conv1d, f_b_proj under self_attn, per-expert w1/w3);
    the tensor check must expect those names, and still name a tensor of the wrong shape."""
    from safetensors.torch import load_file, save_file

    from analysis.models import checkpoint
    from analysis.models.load import check_loadable
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    required, _ = checkpoint.expected_tensors(config, tmp_path)
    assert required["model.layers.0.self_attn.q_conv1d.weight"] == (32, 1, 4)
    assert "model.layers.1.block_sparse_moe.experts.0.w1.weight" in required
    check_loadable(tmp_path, torch.float32, torch.device("cpu"))
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["model.layers.0.self_attn.f_b_proj.weight"] = torch.zeros(8, 16)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(AnalysisError, match="self_attn.f_b_proj.weight"):
        check_loadable(tmp_path, torch.float32, torch.device("cpu"))


def test_bf16_prune_keeps_the_fp32_tensors_transformers_keeps(model, ids, tmp_path):
    """transformers loads dt_bias and the MoE router in fp32 inside a bf16 model; the pruned model keeps them so
    (the router's weights bit for bit), and its saved directory loads back to the same logits."""
    from analysis.io.model_dir import save_model
    model.save_pretrained(tmp_path / "orig")
    bf16 = AutoModelForCausalLM.from_pretrained(tmp_path / "orig", dtype=torch.bfloat16).eval()
    kept = {n: p for n, p in bf16.named_parameters() if p.dtype == torch.float32}
    assert any(n.endswith("dt_bias") for n in kept) and any(n.endswith("mlp.gate.weight") for n in kept)
    pruned = _prune(bf16, [8, 8, 8]).model
    params = dict(pruned.named_parameters())
    assert all(params[n].dtype == torch.float32 for n in kept)
    assert all(torch.equal(params[n], p) for n, p in kept.items() if "mlp.gate" in n)
    loaded = AutoModelForCausalLM.from_pretrained(save_model(pruned, tmp_path / "p"), dtype=torch.bfloat16).eval()
    assert torch.equal(logits(loaded, ids[:, :20]), logits(pruned, ids[:, :20]))
