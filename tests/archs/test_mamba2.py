"""Issue 21: transformers' Mamba-2 mixers (mamba2, nemotron_h, granitemoehybrid, falcon_h1, bamba) through one adapter.

Per covered model type (tiny random-init fp32 CPU models from family_cases/mamba2.py):
- the per-token states the project collects equal a token loop written from Mamba-2's definition;
- the project's logits equal transformers' own torch SSD path (the routed scan's `__wrapped__`);
- pruning N is pure channel removal: the pruned model equals the original with the dropped B and C channels zeroed
  (in_proj rows and conv weight/bias, so they are zero after the convolution), uniform and per-layer; every
  parameter outside the Mamba-2 mixers is copied bit for bit; the saved model loads back;
and the CPU op, the dense rank trace without the delta rule, the fla `mamba2` type clash, the CLI, and bad input.
"""
from __future__ import annotations

import copy
import importlib
import json

import pytest
import torch

from family_cases import assert_close, logits, states_and_layer_inputs
from family_cases.mamba2 import make_config, make_model, reference_states

TYPES = ["mamba2", "nemotron_h", "granitemoehybrid", "falcon_h1", "bamba", "zamba2"]
_models: dict = {}


def _model(model_type):
    if model_type not in _models:
        _models[model_type] = make_model(model_type)
    return _models[model_type]


def _ids(model, tokens=21, seed=0):
    return torch.randint(1, model.config.vocab_size, (2, tokens), generator=torch.Generator().manual_seed(seed))


def test_chunked_op_equals_the_token_loop():
    from analysis.runtime.cpu_ops.linear_attention import chunked_linear_attention, recurrent_linear_attention
    gen = torch.Generator().manual_seed(0)
    B, T, H, dk, dv = 2, 21, 3, 5, 4
    q, k = torch.randn(B, T, H, dk, generator=gen), torch.randn(B, T, H, dk, generator=gen)
    v, g = torch.randn(B, T, H, dv, generator=gen), -torch.rand(B, T, H, generator=gen) * 2
    h0 = torch.randn(B, H, dk, dv, generator=gen)

    class Sink:
        got = {}

        def wanted(self, start, stop):
            return torch.arange(stop - start)

        def take(self, start, offsets, states):
            for i, o in enumerate(offsets.tolist()):
                self.got[start + o] = states[:, :, i]
    sink = Sink()
    o, S = chunked_linear_attention(q, k, v, g, 0.5, h0, chunk_size=8, sink=sink)
    o_ref, states = recurrent_linear_attention(q, k, v, g, 0.5, h0, return_all_states=True)
    assert_close(o, o_ref, 1e-5)
    assert_close(S, states[:, -1], 1e-5)
    assert_close(torch.stack([sink.got[t] for t in range(T)], dim=1), states, 1e-5)


def test_routed_scan_equals_transformers_scan_with_a_prior_state():
    """The routed `mamba2_chunk_scan` (CPU: the project's op) against transformers' torch SSD it replaces, with an
    initial state and the final state returned (a cached prefill), dt_limit clamping and D."""
    from transformers.models.mamba2 import modeling_mamba2 as modeling

    from analysis.archs.mamba2.routing import routed
    gen = torch.Generator().manual_seed(2)
    B, T, H, P, G, n = 2, 13, 4, 3, 2, 5
    x, dt = torch.randn(B, T, H, P, generator=gen), torch.randn(B, T, H, generator=gen)
    Bm, Cm = torch.randn(B, T, G, n, generator=gen), torch.randn(B, T, G, n, generator=gen)
    A, D, dt_bias = -torch.rand(H, generator=gen) * 2, torch.randn(H, generator=gen), torch.randn(H, generator=gen)
    h0 = torch.randn(B, H, P, n, generator=gen)                  # transformers' layout [.., head_dim, N]
    torch_scan = modeling.mamba2_chunk_scan
    while hasattr(torch_scan, "__wrapped__"):
        torch_scan = torch_scan.__wrapped__
    kwargs = dict(D=D, dt_bias=dt_bias, initial_states=h0, dt_softplus=True, dt_limit=(0.05, 2.0),
                  return_final_states=True)
    o, S = routed(torch_scan)(x, dt, A, Bm, Cm, 4, **kwargs)
    o_ref, S_ref = torch_scan(x, dt, A, Bm, Cm, 4, **kwargs)
    assert_close(o, o_ref, 1e-5)
    assert_close(S, S_ref, 1e-5)


def test_dense_rank_trace_follows_plain_linear_attention():
    from analysis.runtime.cpu_ops.linear_attention import recurrent_linear_attention
    from analysis.linalg.spectral_tracker import track_top_singular
    gen = torch.Generator().manual_seed(1)
    B, T, H, dk, dv = 1, 12, 2, 6, 5
    k, v = torch.randn(B, T, H, dk, generator=gen), torch.randn(B, T, H, dv, generator=gen)
    g = -torch.rand(B, T, H, generator=gen)
    _, states = recurrent_linear_attention(k, k, v, g, return_all_states=True)      # [B,T,H,dk,dv]
    fro2, top2, _ = track_top_singular(k.numpy(), v.numpy(), torch.ones(B, T, H).numpy(), g.exp().numpy(),
                                       tol=1e-7, correction=0.0)
    s = torch.linalg.svdvals(states.double()).permute(0, 2, 1, 3)                 # [B,H,T,m]
    assert_close(torch.from_numpy(fro2), s.square().sum(-1), 1e-4)
    assert_close(torch.from_numpy(top2), s[..., 0].square(), 1e-3)


KINDS = {"mamba2": "LL", "nemotron_h": "LSLO", "granitemoehybrid": "LSLL", "falcon_h1": "LSLS", "bamba": "LSL",
         "zamba2": "LSLL"}


@pytest.mark.parametrize("model_type", TYPES)
def test_blocks_are_listed_in_order_and_labelled(model_type):
    """Every token mixer once per use, in forward order: Falcon-H1's parallel attention beside each Mamba-2 mixer,
    Zamba2's shared attention before its hybrid layer's mixer, Nemotron-H's MLP as "other"."""
    from analysis.archs import adapter_for
    from analysis.models.load import describe
    model = _model(model_type)
    blocks = adapter_for(model).blocks(model)
    assert [b.index for b in blocks] == list(range(len(blocks)))
    assert "".join(b.kind[0].upper() for b in blocks) == KINDS[model_type]
    info = describe(model)
    assert [b.linear_layer for b in info.blocks if b.kind == "linear"] == list(range(info.layers))
    assert all(b.kv_cache_bytes_per_token > 0 for b in info.blocks if b.kind == "softmax")
    assert info.head_k_dims == [16] * info.layers and info.heads == 2 and info.value_heads == 8


@pytest.mark.parametrize("model_type", TYPES)
def test_states_equal_the_definition(model_type):
    model = _model(model_type)
    trace, inputs = states_and_layer_inputs(model, _ids(model))
    assert len(trace.layers) >= 2
    for i, layer in enumerate(trace.layers):
        got = layer.states.permute(0, 2, 1, 3, 4).double()
        want = reference_states(model, i, inputs[i])
        assert got.shape == want.shape
        err = float((got - want).abs().max() / want.abs().max())
        assert err <= 1e-4, f"{model_type} layer {i}: relative error {err:.2e}"


@pytest.mark.parametrize("model_type", TYPES)
def test_logits_equal_transformers_torch_path(model_type):
    model = _model(model_type)
    modeling = importlib.import_module(type(model).__module__)
    routed = modeling.mamba2_chunk_scan
    assert getattr(routed, "_analysis_routed", False)
    ids = _ids(model, tokens=19)
    ours = logits(model, ids)
    modeling.mamba2_chunk_scan = routed.__wrapped__          # transformers' own torch SSD (mamba_ssm absent here)
    try:
        theirs = logits(model, ids)
    finally:
        modeling.mamba2_chunk_scan = routed
    assert_close(ours, theirs, 1e-4)


def _zeroed(model, selections):
    from analysis.archs import adapter_for
    from analysis.models.load import linear_layers
    zeroed = copy.deepcopy(model)
    adapter = adapter_for(zeroed)
    with torch.no_grad():
        for layer, sel in zip(linear_layers(zeroed), selections):
            keep = torch.zeros(layer.key_heads, layer.key_dim, dtype=torch.bool).scatter_(1, sel.indices, True)
            for rows in adapter.channel_rows(layer.module):
                dropped = [rows.start + h * layer.key_dim + i for h in range(layer.key_heads)
                           for i in range(layer.key_dim) if not keep[h, i]]
                layer.module.get_parameter(rows.param)[dropped] = 0
    return zeroed


@pytest.mark.parametrize("ratios", ["uniform", "per-layer"])
@pytest.mark.parametrize("model_type", TYPES)
def test_pruning_n_is_pure_channel_removal(model_type, ratios, tmp_path):
    from transformers import AutoModelForCausalLM

    from analysis.archs import adapter_for
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    from analysis.io.model_dir import save_model
    model = _model(model_type)
    n = len(plan_key_dims(model, ratio=0.0))
    plan = {"ratio": 0.5} if ratios == "uniform" else {"ratios": [(0.25, 0.75)[i % 2] for i in range(n)]}
    result = prune(model, "random", plan_key_dims(model, **plan), seed=3)
    ids = _ids(model, seed=1)
    pruned, original = logits(result.model, ids), logits(model, ids)
    zeroed = logits(_zeroed(model, result.selections), ids)
    assert_close(pruned, zeroed, 1e-4)
    assert (pruned - original).abs().max() > 1e-3
    expected_type = model_type if ratios == "uniform" else "pruned_" + model_type
    assert result.model.config.model_type == expected_type
    # everything outside the Mamba-2 mixers (attention, MLP/MoE, norms, embeddings) is copied bit for bit
    adapter = adapter_for(model)
    names = {id(m): n for n, m in model.named_modules()}
    mixers = tuple(names[id(m)] + "." for m in adapter.linear_layers(model))
    before, after = model.state_dict(), result.model.state_dict()
    others = [k for k in before if not k.startswith(mixers)]
    assert others and all(torch.equal(before[k], after[k]) for k in others)
    loaded = AutoModelForCausalLM.from_pretrained(save_model(result.model, tmp_path / "pruned")).eval()
    assert type(loaded).__name__ == type(result.model).__name__
    assert torch.equal(logits(loaded, ids), pruned)


def test_fla_mamba2_type_is_given_back_to_transformers(tmp_path):
    """fla registers its own Mamba2 (Triton-only ops) under model type `mamba2` when imported; after the project is
    ready a transformers-saved mamba2 loads as transformers' class and runs on CPU."""
    from analysis.models.load import load_model
    from analysis.archs.install import ready
    ready()
    import fla.models  # noqa: F401  (fla's registration has run)
    _model("mamba2").save_pretrained(tmp_path / "m")
    model = load_model(str(tmp_path / "m"), device="cpu")
    assert type(model).__module__.startswith("transformers.models.mamba2")
    assert_close(logits(model, _ids(model)), logits(_model("mamba2"), _ids(model)), 1e-5)


def test_cli_on_a_saved_mamba2(tmp_path):
    from analysis.data import corpus as data
    from analysis.cli.main import main
    model = copy.deepcopy(_model("mamba2"))
    model.resize_token_embeddings(len(data.load_tokenizer()), mean_resizing=False)
    model.save_pretrained(tmp_path / "m")
    commands = {
        "rank": ["--tokens", "16", "--batch", "1", "--every-token"],
        "noise": ["--tokens", "16", "--batch", "1", "--samples", "4", "--snr", "0,20", "--keys", "2"],
        "sensitivity": ["--strategy", "l1", "--ratios", "0.5", "--context", "32", "--eval-tokens", "64",
                        "--calib-sequences", "1", "--no-cache"],
        "importance": ["--strategies", "random,l1,wanda,grad,pca,drrqr", "--calib-sequences", "1",
                       "--calib-tokens", "64"],
        "prune": ["--strategy", "l1", "--ratio", "0.5", "--eval-tokens", "260", "--out", str(tmp_path / "pruned")],
        "ppl": ["--context", "32", "--max-tokens", "64"],
        "latency": ["--key-dims", "8,16", "--batch", "1", "--tokens", "32", "--repeats", "1"],
    }
    for command, extra in commands.items():
        out = tmp_path / f"{command}.json"
        assert main([command, str(tmp_path / "m"), "--device", "cpu", *extra, "--json", str(out)]) == 0, command
        assert json.loads(out.read_text()), command
    assert json.loads((tmp_path / "pruned" / "config.json").read_text())["state_size"] == 8
    assert "no key-dim readout scale" in json.loads((tmp_path / "prune.json").read_text())["readout"]
    noise = json.loads((tmp_path / "noise.json").read_text())
    assert noise["query_l2_normalised"] is False and noise["applicable_bounds"].startswith("raw query only")


@pytest.mark.parametrize("model_type", ["mamba", "jamba", "falcon_mamba"])
def test_mamba1_is_one_sentence(model_type, tmp_path, capsys):
    from analysis.cli.main import main
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": model_type}))
    assert main(["rank", str(tmp_path / "m"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Mamba-1" in err and "B/C" in err


def test_groups_that_do_not_divide_the_heads_are_one_sentence(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from analysis.cli.main import main
    from analysis.archs.install import ready
    ready()
    config = make_config("mamba2")
    config.n_groups, config.vocab_size = 3, 8192
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "m")
    assert main(["rank", str(tmp_path / "m"), "--device", "cpu", "--tokens", "8", "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sets n_groups to 3, which does not divide the 8 Mamba-2 heads" in err


def test_train_builds_a_nemotron_h_hybrid(tmp_path):
    """`python -m analysis train --arch mamba2`: a Nemotron-H of Mamba-2 / attention mixers each followed by an MLP."""
    from analysis.archs import adapter_for
    from analysis.cli.main import main
    from analysis.models.load import load_model
    out = tmp_path / "out"
    assert main(["train", "--arch", "mamba2", "--out", str(out), "--work", str(tmp_path / "work"), "--hidden-size",
                 "32", "--layers", "4", "--heads", "4", "--head-dim", "16", "--seq-len", "32", "--batch", "2",
                 "--steps", "2", "--warmup", "1", "--eval-every", "2", "--checkpoint-every", "2", "--device", "cpu",
                 "--quiet"]) == 0
    model = load_model(str(out), device="cpu")
    assert model.config.model_type == "nemotron_h"
    assert "".join(b.kind[0].upper() for b in adapter_for(model).blocks(model)) == "LOLOLOSO"


def test_train_builds_a_granite_h_hybrid_with_tied_embeddings(tmp_path):
    """`train --arch mamba2 --model-type granitemoehybrid`: Granite 4.0-H's layout (one mixer + dense MLP per layer),
    N set apart from the head dim, the LM head tied to the embedding (so the file holds it once)."""
    from safetensors import safe_open
    from analysis.archs import adapter_for
    from analysis.cli.main import main
    from analysis.models.load import load_model
    out = tmp_path / "out"
    assert main(["train", "--arch", "mamba2", "--model-type", "granitemoehybrid", "--out", str(out), "--work",
                 str(tmp_path / "work"), "--hidden-size", "32", "--layers", "4", "--heads", "4", "--head-dim", "16",
                 "--state-size", "8", "--key-heads", "2", "--seq-len", "32", "--batch", "2", "--steps", "2",
                 "--warmup", "1", "--eval-every", "2", "--checkpoint-every", "2", "--device", "cpu", "--quiet"]) == 0
    model = load_model(str(out), device="cpu")
    assert model.config.model_type == "granitemoehybrid" and model.config.num_local_experts == 0
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert not any(k.startswith("lm_head") for k in f.keys())
    adapter = adapter_for(model)
    assert [adapter.key_dim(layer) for layer in adapter.linear_layers(model)] == [8, 8, 8]
    assert [b.kind for b in adapter.blocks(model)] == ["linear", "linear", "linear", "softmax"]


@pytest.mark.parametrize("argv, said", [
    (["--arch", "delta_net", "--model-type", "nemotron_h"], "--model-type nemotron_h cannot be built for --arch "
                                                            "delta_net"),
    (["--arch", "mamba2", "--model-type", "bamba"], "choose from: nemotron_h, granitemoehybrid"),
    (["--arch", "gated_deltanet", "--state-size", "16"], "--state-size applies to Mamba-2 models only"),
])
def test_train_refuses_a_model_type_or_state_size_the_family_cannot_build(tmp_path, capsys, argv, said):
    from analysis.cli.main import main
    assert main(["train", *argv, "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--hidden-size", "32",
                 "--layers", "1", "--heads", "2", "--head-dim", "16", "--steps", "1", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and err.count("\n") == 0
    assert not (tmp_path / "o").exists()
