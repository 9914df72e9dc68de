"""transformers' Qwen3.5 text models through the qwen3_5 adapter: CPU routing, per-token states, and pure pruning
(the real analysis.shrink.prune path against the original with the dropped channels zeroed)."""
from __future__ import annotations

import json
import sys

import pytest
import torch

import analysis  # noqa: F401
from analysis.inspect import states as states_mod
from analysis.archs import adapter_for
from helpers.routing import torch_fallback
from analysis.archs.qwen3_5.adapter import ADAPTER, sum_over_value_heads
from analysis.archs.qwen3_5 import routing
from analysis.runtime.backend import observe_recurrences
from analysis.errors import AnalysisError
from analysis.shrink.prune import prune
from analysis.io.model_dir import save_model
from family_cases import assert_close, logits
from family_cases.qwen3_5 import CASE, make_sibling

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


def test_unrouted_entry_point_reaches_fla_registry_then_the_safety_net(model, ids, monkeypatch):
    """transformers binds fla's Triton kernel when fla is installed. Without the project's patch of transformers'
    global, a CPU call reaches fla's own dispatch (operation 'gated_delta_rule'), where the project's registered
    backend runs it (the same logits); with that backend taken out of fla's registry too, the safety net's sentence,
    never Triton's "0 active drivers"."""
    import fla.backends
    import fla.ops.gated_delta_rule  # noqa: F401  (its operation registry)
    from analysis.runtime import fla_dispatch
    from analysis.runtime.triton_guard import UnroutedKernelError
    expected = logits(model, ids)
    routed = qwen_modeling.torch_chunk_gated_delta_rule
    monkeypatch.setattr(qwen_modeling, "torch_chunk_gated_delta_rule", routed.__wrapped__)
    assert_close(logits(model, ids), expected)
    monkeypatch.delitem(fla.backends._operation_registries["gated_delta_rule"]._backends, fla_dispatch.BACKEND_TYPE)
    with pytest.raises(UnroutedKernelError, match="`chunk_gated_delta_rule` .*called by Qwen3_5GatedDeltaNet"):
        logits(model, ids)


def test_routed_cpu_forward_equals_transformers_torch_fallback(model, ids, tmp_path, monkeypatch):
    model.save_pretrained(tmp_path)  # a directory with no project-specific files
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    routed = logits(loaded, ids)
    for name in routing.ENTRY_POINTS:
        monkeypatch.setattr(qwen_modeling, name, torch_fallback(qwen_modeling, name))
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


# --- pruning: the real analysis.shrink.prune path against an independent reference ----------------------------------

def reference_with_channels_zeroed(model, selections, ids, monkeypatch, readout_key_dims=True):
    """The original model's logits with every dropped q/k channel set to zero where the recurrence reads it.

    Independent of the prune: transformers' own torch recurrence (helpers.routing.torch_fallback) is fed q and k (per KEY
    head, post-conv, before the in-kernel l2 norm) with the dropped channels of each key head multiplied by 0, so
    the kept channels' l2 norm and dot products are exactly those of a model without them. Readout: the pruned
    model keeps dk^-1/2 (readout_key_dims), which the original already uses; with readout_key_dims=False it reads
    out at dk'^-1/2, and the recurrence's output is linear in that scale (o_t = scale · S_tᵀ q_t; the state S does
    not depend on it), so the reference multiplies the output by sqrt(dk/dk')."""
    layers = ADAPTER.linear_layers(model)
    running = []  # index of the linear layer whose forward is running (the recurrence does not know its layer)
    hooks = [layer.register_forward_pre_hook(lambda *_, i=i: running.append(i)) for i, layer in enumerate(layers)]
    kept = [torch.zeros(ADAPTER.key_heads(layer), ADAPTER.key_dim(layer)).scatter_(1, sel.indices, 1.0)
            for layer, sel in zip(layers, selections)]
    module = sys.modules[type(layers[0]).__module__]

    def masked(own):
        def entry(query, key, *args, **kwargs):
            mask = kept[running[-1]]
            assert query.shape[-2:] == key.shape[-2:] == mask.shape  # per key head, dk channels
            out = own(query * mask, key * mask, *args, **kwargs)
            if readout_key_dims:
                return out
            factor = (mask.shape[1] / mask[0].sum()) ** 0.5
            return (out[0] * factor, *out[1:])
        return entry
    try:
        with monkeypatch.context() as patch:
            for name in routing.ENTRY_POINTS:
                patch.setattr(module, name, masked(torch_fallback(module, name)))
            return logits(model, ids)
    finally:
        for hook in hooks:
            hook.remove()


def assert_rest_copied_bit_for_bit(model, pruned):
    """Every tensor outside the linear-attention mixers (softmax blocks, MLPs, norms, embeddings) is unchanged."""
    names = {id(m): n for n, m in model.named_modules()}
    mixers = tuple(names[id(m)] + "." for m in ADAPTER.linear_layers(model))
    before, after = model.state_dict(), pruned.state_dict()
    others = [k for k in before if not k.startswith(mixers)]
    assert any(".self_attn." in k for k in others)  # the full-attention block is among them
    assert all(torch.equal(before[k], after[k]) for k in others)


@pytest.mark.parametrize("dims", [[8, 8, 8], [12, 4, 16]], ids=["uniform", "per-layer"])
def test_prune_equals_zeroed_channels(model, ids, dims, tmp_path, monkeypatch):
    result = prune(model, "random", dims, seed=0)
    pruned = result.model
    assert pruned.config.model_type == "pruned_qwen3_5_text"
    assert [ADAPTER.key_dim(layer) for layer in ADAPTER.linear_layers(pruned)] == dims
    assert ADAPTER.readout_key_dims(pruned) == [16, 16, 16]
    got = logits(pruned, ids)
    # float32 paths with different summation orders (pruned vs. zero-padded dot products, two recurrences): 1e-4
    assert_close(got, reference_with_channels_zeroed(model, result.selections, ids, monkeypatch))
    assert (got - logits(model, ids)).abs().max() > 1e-3  # the prune did change the model
    assert_rest_copied_bit_for_bit(model, pruned)
    loaded = AutoModelForCausalLM.from_pretrained(save_model(pruned, tmp_path / "pruned")).eval()
    assert torch.equal(logits(loaded, ids), got)  # same weights, same code: bitwise on one machine


def test_uniform_default_readout_is_the_family_own_type(model, ids, tmp_path, monkeypatch):
    """Readout at dk'^-1/2 (rescale="default", no readout_key_dims): plain Qwen3.5 with linear_key_head_dim = dk'."""
    result = prune(model, "random", [8, 8, 8], seed=3, rescale="default")
    pruned = result.model
    assert type(pruned) is type(model) and pruned.config.linear_key_head_dim == 8
    assert_close(logits(pruned, ids),
                 reference_with_channels_zeroed(model, result.selections, ids, monkeypatch, readout_key_dims=False))
    save_model(pruned, tmp_path / "pruned")
    assert json.loads((tmp_path / "pruned" / "config.json").read_text())["model_type"] == "qwen3_5_text"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "pruned").eval()
    assert torch.equal(logits(loaded, ids), logits(pruned, ids))


def test_wrong_number_of_key_dims_is_one_sentence(model):
    with pytest.raises(AnalysisError, match="3 linear-attention layers"):
        ADAPTER.pruned_model(model, [8, 8], None)
    with pytest.raises(AnalysisError, match="do not fit the model's"):
        prune(model, "random", [8, 8])


@pytest.mark.parametrize("kind", ["qwen3_next", "qwen3_5_moe_text", "olmo_hybrid"])
def test_sibling_families_route_and_prune_exactly(kind, ids, monkeypatch):
    model = make_sibling(kind)
    assert model.config.model_type == kind and adapter_for(model) is ADAPTER
    assert [b.kind for b in ADAPTER.blocks(model)] == ["linear", "linear", "linear", "softmax"]
    seen = []
    with observe_recurrences(seen.append):
        logits(model, ids)                                         # CPU forward through the routed entry point
    assert len(seen) == 3 and seen[0].k_raw.shape == (2, T, 2, 16)
    result = prune(model, "random", [12, 4, 16], seed=5)
    assert result.model.config.model_type == "pruned_" + kind
    got = logits(result.model, ids)
    assert_close(got, reference_with_channels_zeroed(model, result.selections, ids, monkeypatch))
    assert (got - logits(model, ids)).abs().max() > 1e-3
    assert_rest_copied_bit_for_bit(model, result.model)


@pytest.mark.slow  # tokenises the train split three times (minutes on a busy 2-core machine)
def test_train_qwen3_5_on_cpu_stops_at_a_step_and_resumes_to_the_same_weights(tmp_path, monkeypatch):
    """`train --arch qwen3_5` runs on CPU (routed recurrence, with gradients); `--stop-at` then `--resume` gives the
    uninterrupted run's weights, keeping the schedule of --steps (how the bundled hybrid sample was trained)."""
    from safetensors.torch import load_file

    from analysis.cli.main import main
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
