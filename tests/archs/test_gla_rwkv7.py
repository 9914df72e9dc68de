"""Issue 31: fla's GLA and RWKV-7, beyond what tests/archs/test_families.py checks for every family.

- the two new CPU ops (per-channel-decay linear attention, the diagonal-plus-low-rank delta rule) against their token
  loops and against fla's own naive references (ops/gla/naive.py, ops/generalized_delta_rule/dplr/naive.py);
- every-token rank utilization where the transition is not a scalar decay (GLA, RWKV-7, KDA) against SVDs;
- decoding with a cache (RWKV-7's token-shift cache, GLA's V-first state) equals the full forward;
- RWKV-7's key channel: every per-channel parameter sliced together, the rest of the block bit-identical;
- PCA refused, GLA's shared key heads refused, both latency kernels (CPU timed; the CUDA call bound to fla's signature).
Tolerances: fp32 chunked vs fp32/fp64 loops within 1e-5 relative (a few hundred fp32 updates); SVD-based utilization
within 1e-4 (LAPACK on any x86-64 CPU).
"""
from __future__ import annotations

import importlib
import inspect

import pytest
import torch
import torch.nn.functional as F

from analysis.errors import AnalysisError
from family_cases import decoded
from analysis.runtime.cpu_ops.dplr_delta_rule import chunked_dplr_delta_rule, recurrent_dplr_delta_rule
from analysis.runtime.cpu_ops.gated_linear_attention import (chunked_gated_linear_attention,
                                                             recurrent_gated_linear_attention)


def rel(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1e-12))


def _inputs(T=150, B=2, H=2, dk=16, dv=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, T, H, dk, generator=gen), torch.randn(B, T, H, dk, generator=gen)
    v = torch.randn(B, T, H, dv, generator=gen)
    g = F.logsigmoid(torch.randn(B, T, H, dk, generator=gen)) / 4              # per-channel log-decays in (−∞, 0)
    removal = F.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1)      # RWKV-7: a = −κ̂, b = κ̂ ⊙ α
    a, b = -removal, removal * torch.rand(B, T, H, dk, generator=gen)
    return q, k, v, g, a, b, torch.randn(B, H, dk, dv, generator=gen)


class _Every:
    """A StateSink that keeps the state after every token."""

    def __init__(self):
        self.states = {}

    def wanted(self, start, stop):
        return torch.arange(stop - start)

    def take(self, start, offsets, states):
        for i, o in enumerate(offsets.tolist()):
            self.states[start + o] = states[:, :, i]


@pytest.mark.parametrize("T", [1, 24, 150])   # one token, one short chunk, three chunks with a ragged end
def test_gla_op_equals_its_token_loop_and_fla_naive(T):
    from fla.ops.gla.naive import naive_recurrent_gla
    q, k, v, g, _, _, h0 = _inputs(T)
    scale = q.shape[-1] ** -0.5
    sink = _Every()
    o, S = chunked_gated_linear_attention(q, k, v, g, scale, h0, sink=sink)
    o_loop, states = recurrent_gated_linear_attention(q, k, v, g, scale, h0, return_all_states=True)
    o_fla, S_fla = naive_recurrent_gla(q.double(), k.double(), v.double(), g.double(), h0.double(), True)
    assert rel(o, o_loop) < 1e-5 and rel(S, states[:, -1]) < 1e-5
    assert rel(o, o_fla) < 1e-5 and rel(S, S_fla) < 1e-5
    assert max(rel(sink.states[t], states[:, t]) for t in range(T)) < 1e-5


@pytest.mark.parametrize("T", [1, 24, 150])
def test_dplr_op_equals_its_token_loop_and_fla_naive(T):
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence
    q, k, v, g, a, b, h0 = _inputs(T)
    scale = q.shape[-1] ** -0.5                        # fla's naive reference always reads out at dk^-1/2
    sink = _Every()
    o, S = chunked_dplr_delta_rule(q, k, v, a, b, g, scale, h0, sink=sink)
    o_loop, states = recurrent_dplr_delta_rule(q, k, v, a, b, g, scale, h0, return_all_states=True)
    heads_first = (lambda x: x.transpose(1, 2))  # noqa: E731  (its layout: [B, H, T, D]; it computes in fp32)
    o_fla, S_fla = dplr_recurrence(*(heads_first(x) for x in (q, k, v, a, b, g)), h0)
    assert rel(o, o_loop) < 1e-5 and rel(S, states[:, -1]) < 1e-5
    assert rel(o, o_fla.transpose(1, 2)) < 1e-5 and rel(S, S_fla) < 1e-5
    assert max(rel(sink.states[t], states[:, t]) for t in range(T)) < 1e-5


def _model(family):
    return importlib.import_module(f"family_cases.{family}").CASE.make_model()


@pytest.mark.parametrize("family", ["gla", "rwkv7", "kda"])
def test_every_token_utilization_of_per_channel_transitions_is_the_svd(family):
    """The s1 tracker follows a scalar decay only; these layers' every-token trace comes from an SVD of each state."""
    from analysis.inspect.report import every_token_report
    from analysis.inspect.states import collect_states
    model = _model(family)
    ids = torch.randint(1, model.config.vocab_size, (2, 70), generator=torch.Generator().manual_seed(0))
    trace = collect_states(model, ids, keep_states=True, compute_metrics=False, every_token=True)
    for layer in trace.layers:
        S = layer.states.double()                                           # [B, H, T, dk, dv]
        s = torch.linalg.svdvals(S)
        want = S.square().sum((-1, -2)) / s[..., 0].square() / min(S.shape[-2:])
        assert float((layer.every_token["rank_utilization"] - want).abs().max()) < 1e-4
    report = every_token_report([layer.every_token for layer in trace.layers], 3e-5)
    assert report["method"].startswith("s1 from an SVD") and report["mean_ritz_steps"] is None


@pytest.mark.parametrize("family", ["gla", "rwkv7"])
def test_decoding_with_a_cache_equals_the_full_forward(family):
    model = _model(family)
    ids = torch.randint(1, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(3))
    full, steps, cache = decoded(model, ids, 21)
    assert rel(steps, full.logits[:, 21:]) < 1e-5
    for i in range(len(model.model.layers)):
        assert rel(cache[i]["recurrent_state"], full.past_key_values[i]["recurrent_state"]) < 1e-5


def test_rwkv7_prune_removes_each_key_channel_from_every_parameter_that_holds_it():
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    model = _model("rwkv7")
    result = prune(model, "l1", plan_key_dims(model, ratios=[0.5, 0.75]))
    assert result.model.config.model_type == "pruned_rwkv7" and result.dims == [16, 8]
    for before, after, sel in zip(model.model.layers, result.model.model.layers, result.selections):
        a, p = before.attn, after.attn
        rows = (torch.arange(a.num_heads)[:, None] * a.head_dim + sel.indices).flatten()   # head-major kept rows
        for name in ("r_proj.weight", "k_proj.weight", "w_lora.lora.2.weight", "w_lora.lora.2.bias",
                     "a_lora.lora.2.weight", "a_lora.lora.2.bias", "k_k", "k_a"):
            assert torch.equal(p.get_parameter(name), a.get_parameter(name)[rows]), name
        assert torch.equal(p.r_k, a.r_k.gather(1, sel.indices))
        kept = {n for n in ("r_proj", "k_proj", "w_lora.lora.2", "a_lora.lora.2", "k_k", "k_a", "r_k")}
        untouched = {n: t for n, t in a.state_dict().items() if not any(n.startswith(k) for k in kept)}
        assert untouched and all(torch.equal(p.state_dict()[n], t) for n, t in untouched.items())
        assert p.g_norm.eps == a.g_norm.eps and p.head_dim == sel.indices.shape[1]
        assert torch.equal(after.ffn.key.weight, before.ffn.key.weight)


def test_rwkv7_bonus_term_takes_torch_where_fla_s_kernel_assumes_equal_head_widths():
    """fla's Triton gate/bonus kernel indexes v with r's head dim: a pruned head (dk′ < dv) takes the torch reference
    on CUDA too (a tensor that says it is on CUDA stands in for a GPU)."""
    from analysis.archs.rwkv7.adapter import bonus_by_shape
    from fla.ops.rwkv7.gate_output_correction import gate_output_correction_ref

    class OnCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True

    B, T, H, dv = 1, 3, 2, 8
    routed = bonus_by_shape(lambda *args: "fla's kernel")
    v, g = torch.randn(B, T, H, dv), torch.randn(B, T, H * dv)
    o = torch.randn(B, T, H * dv).as_subclass(OnCuda)
    assert routed(o, torch.randn(B, T, H, dv), torch.randn(B, T, H, dv), torch.randn(H, dv), v, g) == "fla's kernel"
    r, k, r_k = torch.randn(B, T, H, 3), torch.randn(B, T, H, 3), torch.randn(H, 3)   # a pruned head: dk′ = 3 < dv
    assert torch.equal(routed(o, r, k, r_k, v, g), gate_output_correction_ref(o, r, k, r_k, v, g))


@pytest.mark.parametrize("family", ["gla", "rwkv7"])
def test_pca_is_refused_where_each_key_channel_has_its_own_decay(family):
    from analysis.shrink.calibration import calibrate
    from analysis.shrink.importance import importance_report
    from analysis.shrink.prune import prune, usable_strategies
    from analysis.models.key_plan import plan_key_dims
    model = _model(family)
    usable, unusable = usable_strategies(model)
    assert unusable == ["pca"] and "drrqr" in usable and "grad" in usable
    calib = calibrate(model, None, input_ids=torch.randint(1, 256, (1, 32), generator=torch.Generator().manual_seed(0)),
                      label="random ids")
    with pytest.raises(AnalysisError, match="mixes key channels") as refused:
        prune(model, "pca", plan_key_dims(model, ratio=0.5), calib)
    assert "\n" not in str(refused.value)
    report = importance_report(model, None, ["l1", "pca"], 0.5, calib=calib)   # scored where it applies, else said
    assert report["strategies"] == ["l1"] and list(report["scores"]) == ["l1"]
    assert report["refused"] == {"pca": str(refused.value)}
    with pytest.raises(AnalysisError, match="mixes key channels"):
        importance_report(model, None, ["pca"], 0.5, calib=calib)


def test_gla_with_shared_key_heads_is_one_sentence():
    from analysis.models.load import describe
    model = importlib.import_module("family_cases.gla").make_model(num_kv_heads=1)
    with pytest.raises(AnalysisError, match="shares 1 key/value heads among 2 query heads") as refused:
        describe(model)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("kernel", ["gla", "rwkv7"])
def test_latency_times_each_kernel_and_calls_fla_s_chunk_kernel_by_its_signature(kernel):
    """CPU: the project's chunked op is timed. CUDA (no GPU here): the call `latency` makes binds to fla's op."""
    from analysis.archs.kernels import kernel_spec
    from analysis.evaluate.latency import cuda_arguments, kernel_inputs, kernel_latency
    [point] = kernel_latency([8], batch=1, tokens=32, heads=1, value_dim=8, repeats=1, kernel=kernel)
    assert point["kernel"] == kernel and point["median_ms"] > 0 and "project torch chunked path" in point["timer"]
    spec = kernel_spec(kernel)
    x = kernel_inputs(1, 32, 1, 8, 8, "cpu", torch.bfloat16, spec, torch.Generator().manual_seed(0))
    op = getattr(importlib.import_module(spec.cuda_op[0]), spec.cuda_op[1])
    bound = inspect.signature(op).bind(**cuda_arguments(spec, x, torch.bfloat16)).arguments
    assert bound["g" if kernel == "gla" else "w"].dtype == torch.bfloat16
    if kernel == "rwkv7":   # as fla/layers/rwkv7.py calls it: r, w, a = −κ̂, b = κ̂ ⊙ α, scale 1, the gate bound
        assert bound["scale"] == 1.0 and bound["lower_bound"] < 0 and float(bound["w"].max()) < 0
        assert torch.allclose(bound["a"].float().norm(dim=-1), torch.ones(()), atol=1e-2)
