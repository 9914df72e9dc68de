"""transformers' Qwen3.5 text models through the qwen3_5 adapter: CPU routing, per-token states, pure pruning."""
from __future__ import annotations

import copy
import json

import pytest
import torch

import analysis  # noqa: F401
from analysis import states as states_mod
from analysis.archs import adapter_for
from analysis.archs.qwen3_5 import ADAPTER, channel_row_indices, sum_over_value_heads
from analysis.archs import qwen3_5_routing as routing
from analysis.backend import observe_recurrences
from analysis.errors import AnalysisError
from family_cases import assert_close, logits
from family_cases.qwen3_5 import CASE

import transformers.models.qwen3_5.modeling_qwen3_5 as qwen_modeling
from transformers import AutoModelForCausalLM

T = 70  # more than one 64-token chunk


@pytest.fixture(scope="module")
def model():
    return CASE.make_model()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 97, (2, T), generator=torch.Generator().manual_seed(1))




def test_registry_finds_the_adapter(model):
    assert adapter_for(model) is ADAPTER
    kinds = [b.kind for b in ADAPTER.blocks(model)]
    assert kinds == ["linear", "linear", "linear", "softmax"]
    layer = ADAPTER.linear_layers(model)[0]
    assert (ADAPTER.key_heads(layer), ADAPTER.value_heads(layer), ADAPTER.key_dim(layer), ADAPTER.value_dim(layer)) \
        == (2, 4, 16, 8)
    attn = ADAPTER.blocks(model)[3].module
    assert ADAPTER.softmax_cache_bytes(attn, 100, 2) == 2 * 1 * 16 * 100 * 2


def test_unrouted_entry_point_fails_on_cpu(model, ids, monkeypatch):
    """The bug: transformers binds fla's Triton kernel when fla is installed, which has no CPU driver."""
    routed = qwen_modeling.torch_chunk_gated_delta_rule
    monkeypatch.setattr(qwen_modeling, "torch_chunk_gated_delta_rule", routed.__wrapped__)
    with pytest.raises(Exception):
        logits(model, ids)


def test_routed_cpu_forward_equals_transformers_torch_fallback(model, ids, tmp_path, monkeypatch):
    model.save_pretrained(tmp_path)  # a directory with no project-specific files
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    routed = logits(loaded, ids)
    for name in routing.ENTRY_POINTS:
        monkeypatch.setattr(qwen_modeling, name, routing.torch_fallback(qwen_modeling, name))
    assert_close(routed, logits(loaded, ids))


def test_cached_decode_takes_the_routed_recurrent_step(model, ids):
    with torch.no_grad():
        full = model(ids, use_cache=False).logits[:, -1]
        prefix = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], past_key_values=prefix.past_key_values, use_cache=True).logits[:, -1]
    assert_close(step, full)


def test_observer_sees_key_heads_before_the_repeat(model, ids):
    seen = []
    with observe_recurrences(seen.append):
        logits(model, ids)
    assert len(seen) == 3
    r = seen[0]
    assert r.q_raw.shape == r.k_raw.shape == (2, T, 2, 16)       # per KEY head, post-conv, pre-l2norm
    assert r.k.shape == (2, T, 4, 16) and r.v.shape == (2, T, 4, 8)
    assert torch.equal(r.k[:, :, 0], r.k[:, :, 1]) and torch.equal(r.k[:, :, 2], r.k[:, :, 3])
    assert r.g.shape == (2, T, 4) and bool((r.g < 0).all())


def test_states_equal_the_token_loop(model, ids, monkeypatch):
    monkeypatch.setattr(states_mod, "attention_layers", ADAPTER.linear_layers)  # until the core asks the adapter
    inputs = {}
    hooks = [layer.register_forward_pre_hook(
        lambda _m, args, kwargs, i=i: inputs.__setitem__(i, kwargs.get("hidden_states", args[0] if args else None)),
        with_kwargs=True) for i, layer in enumerate(ADAPTER.linear_layers(model))]
    try:
        trace = states_mod.collect_states(model, ids, keep_states=True, compute_metrics=False)
    finally:
        for h in hooks:
            h.remove()
    for i, layer_trace in enumerate(trace.layers):
        got = layer_trace.states.permute(0, 2, 1, 3, 4)             # [B,H,P,dk,dv] -> [B,T,H,dk,dv]
        assert_close(got, CASE.reference_states(model, i, inputs[i]))


def test_value_head_scores_sum_per_key_head():
    x = torch.arange(8.0).reshape(2, 4)                             # [layers?, Hv=4], key heads 2
    assert torch.equal(sum_over_value_heads(x, 2, dim=1), torch.tensor([[1.0, 5.0], [9.0, 13.0]]))


# --- pruning: a tiny local routine over channel_rows (the core's prune migrates to the adapters separately) ----

def _keep_sets(model, dims, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randperm(ADAPTER.key_dim(layer), generator=gen)[:d].sort().values
             for _ in range(ADAPTER.key_heads(layer))] for layer, d in zip(ADAPTER.linear_layers(model), dims)]


def _dropped(layer, keep):
    every = torch.arange(ADAPTER.key_dim(layer))
    return [every[~torch.isin(every, kept)] for kept in keep]


def _prune(model, keep, readout):
    layers = ADAPTER.linear_layers(model)
    pruned = ADAPTER.pruned_model(model, [len(k[0]) for k in keep], readout)
    name_of = {id(m): n for n, m in model.named_modules()}
    state = dict(model.state_dict())
    for layer, kept in zip(layers, keep):
        drops: dict[str, list] = {}
        for rows in ADAPTER.channel_rows(layer):
            drops.setdefault(rows.param, []).append(channel_row_indices(
                rows, ADAPTER.key_heads(layer), ADAPTER.key_dim(layer), _dropped(layer, kept)))
        for param, idx in drops.items():
            full = state[f"{name_of[id(layer)]}.{param}"]
            mask = torch.ones(full.shape[0], dtype=torch.bool)
            mask[torch.cat(idx)] = False
            state[f"{name_of[id(layer)]}.{param}"] = full[mask]
    pruned.load_state_dict(state, strict=True)
    return pruned.eval()


def _zeroed(model, keep):
    """The original model with the dropped q/k channels zeroed after the convolution (conv rows zero → silu(0) = 0)."""
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for layer, kept in zip(ADAPTER.linear_layers(zeroed), keep):
            for rows in ADAPTER.channel_rows(layer):
                if rows.conv:
                    idx = channel_row_indices(rows, ADAPTER.key_heads(layer), ADAPTER.key_dim(layer),
                                              _dropped(layer, kept))
                    dict(layer.named_parameters())[rows.param][idx] = 0
    return zeroed


@pytest.mark.parametrize("dims", [[8, 8, 8], [12, 4, 16]], ids=["uniform", "per-layer"])
def test_prune_equals_zeroed_channels(model, ids, dims, tmp_path):
    keep = _keep_sets(model, dims)
    readout = ADAPTER.readout_key_dims(model)
    pruned = _prune(model, keep, readout)
    assert pruned.config.model_type == "pruned_qwen3_5_text"
    assert [ADAPTER.key_dim(layer) for layer in ADAPTER.linear_layers(pruned)] == dims
    assert ADAPTER.readout_key_dims(pruned) == [16, 16, 16]
    assert_close(logits(pruned, ids), logits(_zeroed(model, keep), ids))
    softmax = [b.index for b in ADAPTER.blocks(model) if b.kind == "softmax"]
    before, after = model.state_dict(), pruned.state_dict()
    for name, value in before.items():
        if any(name.startswith(f"model.layers.{i}.") for i in softmax):
            assert torch.equal(after[name], value), name                 # softmax blocks untouched, bit for bit
    pruned.save_pretrained(tmp_path)
    assert_close(logits(AutoModelForCausalLM.from_pretrained(tmp_path).eval(), ids), logits(pruned, ids), 1e-6)


def test_uniform_default_readout_is_the_family_own_type(model, ids, tmp_path):
    """Readout at dk'^-1/2 (no readout_key_dims): plain Qwen3.5 with linear_key_head_dim = dk'; it equals the zeroed
    original whose gated norm eps is scaled by dk'/dk (RMSNorm(c·o, eps) = RMSNorm(o, eps/c²), c² = dk/dk')."""
    keep = _keep_sets(model, [8, 8, 8], seed=3)
    pruned = _prune(model, keep, None)
    assert type(pruned) is type(model) and pruned.config.linear_key_head_dim == 8
    zeroed = _zeroed(model, keep)
    for layer in ADAPTER.linear_layers(zeroed):
        layer.norm.variance_epsilon *= 8 / 16
    assert_close(logits(pruned, ids), logits(zeroed, ids))
    pruned.save_pretrained(tmp_path)
    assert '"model_type": "qwen3_5_text"' in (tmp_path / "config.json").read_text()
    assert_close(logits(AutoModelForCausalLM.from_pretrained(tmp_path).eval(), ids), logits(pruned, ids), 1e-6)


def test_wrong_number_of_key_dims_is_one_sentence(model):
    with pytest.raises(AnalysisError, match="3 linear-attention layers"):
        ADAPTER.pruned_model(model, [8, 8], None)


# --- the other transformers GDN families the adapter covers: Qwen3-Next (interleaved q|k|v|z), Qwen3.5-MoE and
# OLMo-hybrid (separate q/k projections, o_norm) ---

def _tiny_sibling(kind: str):
    common = dict(vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                  head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                  linear_value_head_dim=8, layer_types=["linear_attention"] * 3 + ["full_attention"],
                  moe_intermediate_size=16, shared_expert_intermediate_size=16, num_experts=2, num_experts_per_tok=1,
                  tie_word_embeddings=True, max_position_embeddings=256)
    if kind == "qwen3_next":
        from transformers.models.qwen3_next import Qwen3NextConfig as Config
        common["intermediate_size"] = 32
    elif kind == "olmo_hybrid":
        from transformers.models.olmo_hybrid import OlmoHybridConfig as Config
        for moe in ("moe_intermediate_size", "shared_expert_intermediate_size", "num_experts", "num_experts_per_tok"):
            del common[moe]
        common.update(intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, pad_token_id=0,
                      eos_token_id=0)
        del common["head_dim"]
    else:
        from transformers.models.qwen3_5_moe import Qwen3_5MoeTextConfig as Config
    ADAPTER.install_routing()
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(Config(**common)).float().eval()


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5_moe_text", "olmo_hybrid"])
def test_sibling_families_route_and_prune_exactly(kind, ids):
    model = _tiny_sibling(kind)
    assert model.config.model_type == kind and adapter_for(model) is ADAPTER
    assert [b.kind for b in ADAPTER.blocks(model)] == ["linear", "linear", "linear", "softmax"]
    seen = []
    with observe_recurrences(seen.append):
        logits(model, ids)                                         # CPU forward through the routed entry point
    assert len(seen) == 3 and seen[0].k_raw.shape == (2, T, 2, 16)
    keep = _keep_sets(model, [12, 4, 16], seed=5)
    pruned = _prune(model, keep, ADAPTER.readout_key_dims(model))
    assert pruned.config.model_type == "pruned_" + kind
    assert_close(logits(pruned, ids), logits(_zeroed(model, keep), ids))


@pytest.mark.slow  # tokenises the train split three times (minutes on a busy 2-core machine)
def test_train_qwen3_5_on_cpu_stops_at_a_step_and_resumes_to_the_same_weights(tmp_path, monkeypatch):
    """`train --arch qwen3_5` runs on CPU (routed recurrence, with gradients); `--stop-at` then `--resume` gives the
    uninterrupted run's weights, keeping the schedule of --steps (how the bundled hybrid sample was trained)."""
    from safetensors.torch import load_file

    from analysis.cli import main
    monkeypatch.chdir(tmp_path)
    tiny = ["--arch", "qwen3_5", "--hidden-size", "32", "--layers", "4", "--heads", "2", "--key-heads", "1",
            "--head-dim", "16", "--intermediate-size", "32", "--seq-len", "32", "--batch", "2", "--warmup", "1",
            "--eval-every", "2", "--checkpoint-every", "2", "--steps", "4", "--device", "cpu"]

    def run(name, *extra):
        return main(["train", "--out", str(tmp_path / name / "final"), "--work", str(tmp_path / name / "work"),
                     *tiny, *extra])
    assert run("straight") == 0
    assert run("halves", "--stop-at", "2") == 0
    assert json.loads((tmp_path / "halves" / "final" / "training.json").read_text())["steps_done"] == 2
    assert run("halves", "--resume") == 0
    a = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    b = load_file(tmp_path / "halves" / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    config = json.loads((tmp_path / "straight" / "final" / "config.json").read_text())
    assert config["model_type"] == "qwen3_5_text" and config["layer_types"].count("full_attention") == 1
