"""The torch ops against independent references: fla's naive.py, a token loop, nn.Conv1d, fla's norm refs."""
import pytest
import torch
import torch.nn.functional as F

import analysis  # noqa: F401
from analysis.runtime.cpu_ops.conv import causal_conv1d
from analysis.runtime.cpu_ops.delta_rule import chunked_delta_rule, recurrent_delta_rule
from analysis.runtime.cpu_ops.norms import rms_norm
from helpers.state_sink import Sink


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item()


def inputs(B=2, T=150, H=3, K=32, V=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g)
    gate = -2 * torch.rand(B, T, H, generator=g)
    h0 = torch.randn(B, H, K, V, generator=g)
    return q, k, v, beta, gate, h0


@pytest.mark.parametrize("T", [1, 37, 64, 150])
@pytest.mark.parametrize("gated", [False, True])
def test_chunked_equals_token_loop(T, gated):
    q, k, v, beta, gate, h0 = inputs(T=T)
    g = gate if gated else None
    o1, s1 = chunked_delta_rule(q, k, v, beta, g, initial_state=h0)
    o2, s2 = recurrent_delta_rule(q, k, v, beta, g, initial_state=h0)
    assert rel(o1, o2) < 1e-5 and rel(s1, s2) < 1e-5


def test_matches_fla_naive_references():
    from fla.ops.delta_rule.naive import delta_rule_recurrence
    from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule, naive_recurrent_gated_delta_rule
    q, k, v, beta, gate, h0 = inputs(T=128)
    o, s = naive_recurrent_gated_delta_rule(q, k, v, beta, gate, scale=32 ** -0.5, initial_state=h0,
                                            output_final_state=True)
    o1, s1 = chunked_delta_rule(q, k, v, beta, gate, initial_state=h0)
    assert rel(o1, o) < 1e-5 and rel(s1, s) < 1e-5
    o, s = naive_chunk_gated_delta_rule(q, k, v, gate, beta, chunk_size=64, scale=32 ** -0.5,
                                        initial_state=h0, output_final_state=True)
    assert rel(o1, o) < 1e-4 and rel(s1, s) < 1e-4
    t = lambda x: x.transpose(1, 2)  # noqa: E731  (the DeltaNet reference is head-first)
    o, s = delta_rule_recurrence(t(q), t(k), t(v), t(beta), initial_state=h0, output_final_state=True)
    o1, s1 = chunked_delta_rule(q, k, v, beta, None, initial_state=h0)
    assert rel(o1, t(o)) < 1e-5 and rel(s1, s) < 1e-5


def test_per_token_states_and_strong_decay():
    q, k, v, beta, gate, h0 = inputs(T=100)
    gate = gate * 40  # e^{-80} within a chunk: must not overflow or NaN
    sink = Sink(range(100))
    chunked_delta_rule(q, k, v, beta, gate, initial_state=h0, sink=sink)
    states = torch.cat(sink.parts, dim=2).transpose(1, 2)
    _, ref = recurrent_delta_rule(q, k, v, beta, gate, initial_state=h0, return_all_states=True)
    assert sink.offsets == list(range(100))
    assert torch.isfinite(states).all()
    assert rel(states, ref) < 1e-5


@pytest.mark.parametrize("gated", [False, True])
def test_only_requested_states_are_handed_over(gated):
    q, k, v, beta, gate, h0 = inputs(T=150)
    wanted = [0, 5, 63, 64, 100, 127, 128, 149]
    sink = Sink(wanted)
    chunked_delta_rule(q, k, v, beta, gate if gated else None, initial_state=h0, sink=sink)
    _, ref = recurrent_delta_rule(q, k, v, beta, gate if gated else None, initial_state=h0, return_all_states=True)
    assert sink.offsets == wanted and [p.shape[2] for p in sink.parts] == [3, 3, 2]
    assert rel(torch.cat(sink.parts, dim=2).transpose(1, 2), ref[:, wanted]) < 1e-5


def test_states_at_takes_a_per_key_channel_gate():
    """A per-channel Γ (one decay per key channel) equal across channels gives the per-head result."""
    from analysis.runtime.cpu_ops.delta_rule import states_at
    g = torch.Generator().manual_seed(4)
    B, H, C, K, V = 1, 2, 8, 5, 3
    S0, k, U = torch.randn(B, H, K, V, generator=g), torch.randn(B, H, C, K, generator=g), torch.randn(B, H, C, V, generator=g)
    G = (-torch.rand(B, H, C, generator=g)).cumsum(-1)
    decay = (G[..., :, None] - G[..., None, :]).exp().tril()
    idx = torch.tensor([1, 6])
    per_head = states_at(S0, G, decay, k, U, idx)
    per_channel = states_at(S0, G[..., None].expand(-1, -1, -1, K), decay[..., None].expand(-1, -1, -1, -1, K), k, U, idx)
    manual = torch.stack([G[:, :, t, None, None].exp() * S0 + torch.einsum("bhj,bhjk,bhjv->bhkv", decay[:, :, t], k, U)
                          for t in idx.tolist()], dim=2)
    assert rel(per_head, manual) < 1e-6 and rel(per_channel, manual) < 1e-6


def test_gradients_match_token_loop():
    q, k, v, beta, gate, h0 = (x.requires_grad_() for x in inputs(B=1, T=70, H=2, K=8, V=8))
    o1, s1 = chunked_delta_rule(q, k, v, beta, gate, initial_state=h0)
    g1 = torch.autograd.grad((o1.square().sum() + s1.sum()), (q, k, v, beta, gate, h0))
    o2, s2 = recurrent_delta_rule(q, k, v, beta, gate, initial_state=h0)
    g2 = torch.autograd.grad((o2.square().sum() + s2.sum()), (q, k, v, beta, gate, h0))
    for a, b in zip(g1, g2):
        assert rel(a, b) < 1e-4


def test_fla_entry_points_on_cpu_match_naive():
    """The patched fla op names prepare inputs exactly as the kernels do (l2, sigmoid, gate, GVA, V-first)."""
    import fla.layers.gated_deltanet as gdn
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
    g = torch.Generator().manual_seed(1)
    B, T, H, HV, K, V = 2, 80, 2, 4, 16, 24
    q, k = torch.randn(B, T, H, K, generator=g), torch.randn(B, T, H, K, generator=g)
    v, a, b = torch.randn(B, T, HV, V, generator=g), torch.randn(B, T, HV, generator=g), torch.randn(B, T, HV, generator=g)
    A_log, dt_bias = torch.randn(HV, generator=g), torch.randn(HV, generator=g)
    h0 = torch.randn(B, HV, V, K, generator=g)  # V-first
    o, s = gdn.chunk_gated_delta_rule(q=q, k=k, v=v, g=a, beta=b, initial_state=h0, output_final_state=True,
                                      use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                      allow_neg_eigval=True, state_v_first=True, use_gate_in_kernel=True,
                                      A_log=A_log, dt_bias=dt_bias)
    l2 = lambda x: x / torch.sqrt(x.square().sum(-1, keepdim=True) + 1e-6)  # noqa: E731
    rep = lambda x: x.repeat_interleave(HV // H, dim=2)  # noqa: E731
    decay = -A_log.exp() * F.softplus(a + dt_bias)
    o_ref, s_ref = naive_recurrent_gated_delta_rule(rep(l2(q)), rep(l2(k)), v, 2 * b.sigmoid(), decay,
                                                    scale=K ** -0.5, initial_state=h0.transpose(-1, -2),
                                                    output_final_state=True)
    assert rel(o, o_ref) < 1e-5 and rel(s, s_ref.transpose(-1, -2)) < 1e-5


def conv_reference(x, weight, activation=True):
    """nn.Conv1d's own causal convolution (padding W-1, keep the first T outputs)."""
    W = weight.shape[-1]
    y = F.conv1d(x.transpose(1, 2), weight[:, None], padding=W - 1, groups=x.shape[-1])[..., :x.shape[1]]
    y = y.transpose(1, 2)
    return F.silu(y) if activation else y


def test_short_conv_matches_conv1d_and_continues_from_cache():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 30, 8, generator=g), torch.randn(8, 4, generator=g)
    y, state = causal_conv1d(x, w, activation="silu", output_final_state=True)
    assert rel(y, conv_reference(x, w)) < 1e-6
    assert torch.equal(state, x[:, -4:].transpose(1, 2))
    y1, s1 = causal_conv1d(x[:, :20], w, activation="silu", output_final_state=True)
    y2, s2 = causal_conv1d(x[:, 20:], w, activation="silu", initial_state=s1, output_final_state=True)
    assert rel(torch.cat([y1, y2], 1), y) < 1e-6 and torch.equal(s2, state)
    _, short = causal_conv1d(x[:, :2], w, output_final_state=True)  # fewer tokens than the kernel
    assert torch.equal(short[..., :2], torch.zeros(2, 8, 2)) and torch.equal(short[..., 2:], x[:, :2].transpose(1, 2))


def test_rms_norm_matches_fla_reference():
    from fla.modules.norm.layernorm import rms_norm_ref
    g = torch.Generator().manual_seed(0)
    x, r, w = torch.randn(3, 5, 16, generator=g), torch.randn(3, 5, 16, generator=g), torch.randn(16, generator=g)
    y, res = rms_norm(x, w, residual=r, eps=1e-6, prenorm=True)
    y_ref, res_ref = rms_norm_ref(x, w, None, residual=r, eps=1e-6, prenorm=True)
    assert rel(y, y_ref) < 1e-6 and rel(res, res_ref) < 1e-6
    gate = torch.randn(3, 5, 16, generator=g)
    assert rel(rms_norm(x, w, gate=gate, eps=1e-6), rms_norm_ref(x, w, None, eps=1e-6) * F.silu(gate)) < 1e-6


def test_bf16_inputs_compute_in_fp32():
    q, k, v, beta, gate, h0 = inputs(T=64)
    o_bf, _ = chunked_delta_rule(q.bfloat16(), k.bfloat16(), v.bfloat16(), beta.bfloat16(), gate)
    o, _ = chunked_delta_rule(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(),
                              beta.bfloat16().float(), gate)
    assert o_bf.dtype == torch.float32 and rel(o_bf, o) < 1e-6
