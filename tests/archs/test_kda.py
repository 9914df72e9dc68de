"""Kimi Delta Attention (fla `kda`): per-channel CPU op, routed forward, states, adapter and pruning.

Independent references: fla's naive KDA (naive_recurrent_kda / naive_chunk_kda and its gate refs, pure
torch), the project's token loop, and tests/family_cases/kda.py (a loop written from KDA's definition).
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import analysis  # noqa: F401  (CPU routing for fla, pruned_kda registered)
from analysis.archs import adapter_for
from analysis.archs.kda import ADAPTER
from analysis.runtime.cpu_ops.delta_rule import chunked_delta_rule, recurrent_delta_rule
from analysis.errors import AnalysisError
from family_cases.kda import make_model, reference_states
from helpers.state_sink import Sink

TOL = 1e-4


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item()


def inputs(B=2, T=150, H=3, K=32, V=48, seed=0, strength=2.0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    beta = torch.rand(B, T, H, generator=g)
    gate = -strength * torch.rand(B, T, H, K, generator=g)        # per key channel
    h0 = torch.randn(B, H, K, V, generator=g)
    return q, k, v, beta, gate, h0


# --- the CPU op ---------------------------------------------------------------------------------

@pytest.mark.parametrize("T", [1, 37, 64, 150])
def test_per_channel_chunked_equals_loop_and_fla_naive(T):
    from fla.ops.kda.naive import naive_recurrent_kda
    q, k, v, beta, gate, h0 = inputs(T=T)
    o1, s1 = chunked_delta_rule(q, k, v, beta, gate, initial_state=h0)
    o2, s2 = recurrent_delta_rule(q, k, v, beta, gate, initial_state=h0)
    o3, s3 = naive_recurrent_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True)
    assert rel(o1, o2) < 1e-5 and rel(s1, s2) < 1e-5
    assert rel(o1, o3) < TOL and rel(s1, s3) < TOL and rel(o2, o3) < TOL


def test_per_channel_matches_fla_naive_chunk():
    from fla.ops.kda.naive import naive_chunk_kda
    q, k, v, beta, gate, h0 = inputs(T=128)
    o, s = naive_chunk_kda(q, k, v, gate, beta, initial_state=h0, output_final_state=True)
    o1, s1 = chunked_delta_rule(q, k, v, beta, gate, initial_state=h0)
    assert rel(o1, o) < TOL and rel(s1, s) < TOL


def test_per_head_gate_is_the_per_channel_gate_broadcast():
    q, k, v, beta, gate, h0 = inputs(T=100)
    head_gate = gate[..., 0]
    o1, s1 = chunked_delta_rule(q, k, v, beta, head_gate, initial_state=h0)
    o2, s2 = chunked_delta_rule(q, k, v, beta, head_gate[..., None].expand_as(gate), initial_state=h0)
    assert rel(o1, o2) < 1e-5 and rel(s1, s2) < 1e-5


def test_per_channel_states_after_every_token_under_strong_decay():
    q, k, v, beta, gate, h0 = inputs(T=100, strength=80.0)   # e^{-80} per token on some channels
    every, sparse = Sink(range(100)), Sink([0, 5, 63, 64, 99])
    o, _ = chunked_delta_rule(q, k, v, beta, gate, initial_state=h0, sink=every)
    chunked_delta_rule(q, k, v, beta, gate, initial_state=h0, sink=sparse)
    states = torch.cat(every.parts, dim=2).transpose(1, 2)
    o_ref, ref = recurrent_delta_rule(q, k, v, beta, gate, initial_state=h0, return_all_states=True)
    assert torch.isfinite(states).all() and torch.isfinite(o).all()
    assert rel(states, ref) < 1e-5 and rel(o, o_ref) < 1e-5   # exponents summed, never subtracted
    assert sparse.offsets == [0, 5, 63, 64, 99]                # only the requested states are handed over
    assert rel(torch.cat(sparse.parts, dim=2).transpose(1, 2), ref[:, [0, 5, 63, 64, 99]]) < 1e-5


def test_per_channel_gradients_match_token_loop():
    q, k, v, beta, gate, h0 = (x.requires_grad_() for x in inputs(B=1, T=70, H=2, K=8, V=8))
    o1, s1 = chunked_delta_rule(q, k, v, beta, gate, initial_state=h0)
    g1 = torch.autograd.grad((o1.square().sum() + s1.sum()), (q, k, v, beta, gate, h0))
    o2, s2 = recurrent_delta_rule(q, k, v, beta, gate, initial_state=h0)
    g2 = torch.autograd.grad((o2.square().sum() + s2.sum()), (q, k, v, beta, gate, h0))
    for a, b in zip(g1, g2):
        assert rel(a, b) < TOL


@pytest.mark.parametrize("C", [64, 48])   # 48: padded to 64 inside the recursive halving
def test_channel_products_equal_their_definition(C):
    """P_ij = Σ_c x_ic y_jc exp(Σ_{j<l≤i} g_lc) for j ≤ i, 0 above, against the direct fp64 formula."""
    from analysis.runtime.cpu_ops.delta_rule import channel_products
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, C, 8, generator=gen), torch.randn(2, C, 8, generator=gen)
    g = -3 * torch.rand(2, C, 8, generator=gen)
    G = g.double().cumsum(-2)
    direct = torch.einsum("bic,bijc,bjc->bij", x.double(), (G[:, :, None] - G[:, None]).exp(), y.double())
    assert rel(channel_products(x, y, g).double(), direct.tril()) < 1e-6


def test_chunk_size_need_not_be_a_power_of_two():
    q, k, v, beta, gate, h0 = inputs(T=100)
    o1, s1 = chunked_delta_rule(q, k, v, beta, gate, initial_state=h0, chunk_size=48)
    o2, s2 = recurrent_delta_rule(q, k, v, beta, gate, initial_state=h0)
    assert rel(o1, o2) < 1e-5 and rel(s1, s2) < 1e-5


# --- fla's entry points, routed -------------------------------------------------------------------

def naive_kda_op(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None,
                 output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                 use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None, state_v_first=False,
                 cu_seqlens=None, **_):
    """fla's KDA entry points rebuilt from fla's own naive references (gate refs + naive_recurrent_kda)."""
    from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate
    from fla.ops.kda.naive import naive_recurrent_kda
    if use_qk_l2norm_in_kernel:
        q, k = (x.float() / torch.sqrt(x.float().square().sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    if use_gate_in_kernel:
        g = (naive_kda_lowerbound_gate(g, A_log, dt_bias, lower_bound) if lower_bound is not None
             else naive_kda_gate(g, A_log, dt_bias))
    if use_beta_sigmoid_in_kernel:
        beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    if initial_state is not None and state_v_first:
        initial_state = initial_state.transpose(-1, -2)
    bounds = [0, q.shape[1]] if cu_seqlens is None else cu_seqlens.tolist()
    outs, finals = [], []
    for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:])):
        h0 = None if initial_state is None else initial_state[n:n + 1] if cu_seqlens is not None else initial_state
        o, S = naive_recurrent_kda(q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e], scale, h0, True)
        outs.append(o)
        finals.append(S)
    S = torch.cat(finals)
    if state_v_first:
        S = S.transpose(-1, -2)
    return torch.cat(outs, dim=1), (S if output_final_state else None)


def raw_inputs(B=2, T=80, H=2, HV=4, K=16, V=24, seed=1):
    g = torch.Generator().manual_seed(seed)
    return dict(q=torch.randn(B, T, H, K, generator=g), k=torch.randn(B, T, H, K, generator=g),
                v=torch.randn(B, T, HV, V, generator=g), g=torch.randn(B, T, HV, K, generator=g),
                beta=torch.randn(B, T, HV, generator=g), A_log=torch.randn(HV, generator=g),
                dt_bias=torch.randn(HV * K, generator=g), initial_state=torch.randn(B, HV, V, K, generator=g))


@pytest.mark.parametrize("entry", ["chunk_kda", "fused_recurrent_kda"])
@pytest.mark.parametrize("lower_bound", [None, -5.0])
def test_fla_kda_entry_points_on_cpu_match_naive(entry, lower_bound):
    """Routed fla ops prepare inputs as the kernels do: l2, sigmoid ×2, in-kernel gate, GVA, V-first state."""
    import fla.layers.kda as kda_layer
    args = dict(raw_inputs(), output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, lower_bound=lower_bound,
                state_v_first=True)
    o, s = getattr(kda_layer, entry)(**args)
    o_ref, s_ref = naive_kda_op(**args)
    assert rel(o, o_ref) < TOL and rel(s, s_ref) < TOL


def test_packed_sequences_run_one_by_one():
    import fla.layers.kda as kda_layer
    args = raw_inputs(B=1, T=90)
    args["initial_state"] = torch.randn(2, 4, 24, 16)
    args.update(cu_seqlens=torch.tensor([0, 30, 90]), output_final_state=True, use_qk_l2norm_in_kernel=True,
                use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, state_v_first=True)
    o, s = kda_layer.chunk_kda(**args)
    o_ref, s_ref = naive_kda_op(**args)
    assert rel(o, o_ref) < TOL and rel(s, s_ref) < TOL


@pytest.mark.parametrize("tokens", [20, 80])   # ≤ 64 without grad: fused_recurrent_kda; more: chunk_kda
@pytest.mark.parametrize("overrides", [{}, {"lower_bound": -5.0, "num_v_heads": 2, "allow_neg_eigval": True}])
def test_routed_forward_matches_fla_naive_ops(monkeypatch, tokens, overrides):
    import fla.layers.kda as kda_layer
    model = make_model(**overrides)
    ids = torch.randint(0, 256, (2, tokens), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        routed = model(ids, use_cache=False).logits
        monkeypatch.setattr(kda_layer, "chunk_kda", naive_kda_op)
        monkeypatch.setattr(kda_layer, "fused_recurrent_kda", naive_kda_op)
        naive = model(ids, use_cache=False).logits
    assert torch.isfinite(routed).all() and rel(routed, naive) < TOL


def test_install_routing_is_idempotent():
    import fla.layers.kda as kda_layer
    before = (kda_layer.chunk_kda, kda_layer.fused_recurrent_kda)
    ADAPTER.install_routing()
    assert (kda_layer.chunk_kda, kda_layer.fused_recurrent_kda) == before
    from analysis.runtime import fla_dispatch
    assert fla_dispatch.routes_to_project(before[0])   # chunk_kda: through fla's dispatch registry
    assert before[1]._analysis_routed                  # fused_recurrent_kda: fla does not dispatch it, patched


# --- states ---------------------------------------------------------------------------------------

def layer_inputs(model, ids):
    seen = []
    hooks = [a.register_forward_pre_hook(lambda _m, args, kwargs: seen.append(
        (args[0] if args else kwargs["hidden_states"]).detach()), with_kwargs=True)
        for a in ADAPTER.linear_layers(model)]
    try:
        with torch.no_grad():
            model(ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_collected_states_equal_token_loop_from_the_definition():
    from analysis.inspect.states import collect_states
    model = make_model()
    ids = torch.randint(0, 256, (2, 70), generator=torch.Generator().manual_seed(3))
    trace = collect_states(model, ids, keep_states=True, compute_metrics=False)
    for index, hidden in enumerate(layer_inputs(model, ids)):
        expected = reference_states(model, index, hidden)                  # [B, T, Hv, dk, dv]
        got = trace.layers[index].states.transpose(1, 2)                   # [B, H, P, dk, dv] -> [B, P, H, ...]
        assert got.shape == expected.shape == (2, 70, 4, 32, 32)
        assert rel(got, expected) < TOL


# --- the adapter ----------------------------------------------------------------------------------

def test_adapter_structure_and_channel_rows():
    model = make_model()
    assert adapter_for(model) is ADAPTER and adapter_for({"model_type": "pruned_kda"}) is ADAPTER
    assert [b.kind for b in ADAPTER.blocks(model)] == ["linear", "linear"]
    layer = ADAPTER.linear_layers(model)[0]
    Hk, Hv, dk, dv = (ADAPTER.key_heads(layer), ADAPTER.value_heads(layer), ADAPTER.key_dim(layer),
                      ADAPTER.value_dim(layer))
    assert (Hk, Hv, dk, dv) == (2, 4, 32, 32)
    params = dict(layer.named_parameters())
    rows = ADAPTER.channel_rows(layer)
    assert [(r.param, r.role) for r in rows] == [
        ("q_proj.weight", "q"), ("k_proj.weight", "k"), ("q_conv1d.weight", "q"), ("k_conv1d.weight", "k"),
        ("f_proj.1.weight", "gate"), ("dt_bias", "gate")]
    for r in rows:
        assert params[r.param].shape[0] == (Hv if r.role == "gate" else Hk) * dk
    assert ADAPTER.kernel_spec.recurrence.decay == "channel" and ADAPTER.kernel == "kda" and not ADAPTER.rotations
    assert ADAPTER.readout_key_dims(model) == [32, 32]


def test_bad_key_dims_and_configs_get_one_sentence():
    model = make_model()
    with pytest.raises(AnalysisError, match="outside 1..256"):
        ADAPTER.pruned_model(model, [300, 16], None)
    with pytest.raises(AnalysisError, match="one per KDA layer"):
        ADAPTER.pruned_model(model, [16], None)
    config = copy.deepcopy(model.config)
    config.num_heads, config.num_v_heads = 3, 4
    with pytest.raises(AnalysisError, match="not a multiple of num_heads=3"):
        ADAPTER.check_config(config)


# --- pruning: pure channel removal ----------------------------------------------------------------

def random_keep(model, dims, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.stack([torch.randperm(ADAPTER.key_dim(a), generator=gen)[:d].sort().values
                         for _ in range(ADAPTER.key_heads(a))])
            for a, d in zip(ADAPTER.linear_layers(model), dims)]


def channel_index(layer, rows, keep):
    """Row indices of `rows` that carry the kept channels `keep` [Hk, dk'] (gate rows: per value head)."""
    Hk, dk = ADAPTER.key_heads(layer), ADAPTER.key_dim(layer)
    heads = ADAPTER.value_heads(layer) if rows.role == "gate" else Hk
    key_head = torch.arange(heads) // (heads // Hk)
    return rows.start + (torch.arange(heads)[:, None] * dk + keep[key_head]).flatten()


def prefixes(model):
    return [f"model.layers.{b.index}.attn." for b in ADAPTER.blocks(model) if b.kind == "linear"]


def prune_locally(model, keep, readout):
    """The adapter's pruned model loaded with the original weights sliced along every ChannelRows."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for layer, prefix, kept in zip(ADAPTER.linear_layers(model), prefixes(model), keep):
        for rows in ADAPTER.channel_rows(layer):
            state[prefix + rows.param] = state[prefix + rows.param][channel_index(layer, rows, kept)]
    pruned = ADAPTER.pruned_model(model, [k.shape[1] for k in keep], readout)
    pruned.load_state_dict(state, strict=True)
    return pruned


def zeroed_original(model, keep):
    """The original with the dropped q/k channels zero after the conv (decay rows left as they are)."""
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for layer, kept in zip(ADAPTER.linear_layers(zeroed), keep):
            for rows in ADAPTER.channel_rows(layer):
                if rows.role in ("q", "k"):
                    param = layer.get_parameter(rows.param)
                    dropped = torch.ones(param.shape[0], dtype=torch.bool)
                    dropped[channel_index(layer, rows, kept)] = False
                    param[dropped] = 0
    return zeroed


@pytest.mark.parametrize("overrides", [{}, {"lower_bound": -5.0}])
@pytest.mark.parametrize("dims", [[16, 16], [16, 24]])
def test_pruned_model_equals_zeroed_channels(overrides, dims):
    model = make_model(**overrides)
    keep = random_keep(model, dims)
    ids = torch.randint(0, 256, (2, 90), generator=torch.Generator().manual_seed(1))
    pruned = prune_locally(model, keep, ADAPTER.readout_key_dims(model))
    zeroed = zeroed_original(model, keep)
    assert pruned.config.model_type == "pruned_kda" and pruned.config.head_k_dims == dims
    for layer, kept in zip(ADAPTER.linear_layers(pruned), keep):     # the dropped decay channels are gone
        assert layer.dt_bias.shape[0] == layer.f_proj[1].weight.shape[0] == 4 * kept.shape[1]
    original, new = model.state_dict(), pruned.state_dict()
    sliced = {p + r.param for p in prefixes(model) for r in ADAPTER.channel_rows(ADAPTER.linear_layers(model)[0])}
    for name, tensor in new.items():
        assert name in sliced or torch.equal(tensor, original[name]), name
    with torch.no_grad():
        reference = zeroed(ids).logits
        assert (pruned(ids).logits - reference).abs().max().item() < TOL
        # the test can fail: zeroing changes the model, and KDA's own dk'^-1/2 readout is not channel removal
        assert (model(ids).logits - reference).abs().max().item() > 100 * TOL
        default = prune_locally(model, keep, None)
        assert (default(ids).logits - reference).abs().max().item() > 100 * TOL


def test_uniform_prune_at_default_readout_is_fla_kda_and_reloads(tmp_path):
    from transformers import AutoModelForCausalLM
    model = make_model()
    keep = random_keep(model, [16, 16])
    pruned = prune_locally(model, keep, None)
    assert type(pruned).__name__ == "KDAForCausalLM" and pruned.config.model_type == "kda"
    assert (pruned.config.head_dim, pruned.config.expand_v) == (16, 2.0)
    assert ADAPTER.value_dim(ADAPTER.linear_layers(pruned)[0]) == 32
    per_layer = prune_locally(model, random_keep(model, [16, 24]), ADAPTER.readout_key_dims(model))
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(2))
    for i, m in enumerate((pruned, per_layer)):
        m.save_pretrained(tmp_path / str(i))
        back = AutoModelForCausalLM.from_pretrained(tmp_path / str(i)).eval()
        assert type(back) is type(m)
        with torch.no_grad():
            assert torch.equal(back(ids).logits, m(ids).logits)


def test_hybrid_softmax_blocks_are_labelled_and_untouched(monkeypatch):
    import fla.layers.attn as attn_module
    monkeypatch.setattr(attn_module, "flash_attn_func", lambda *a, **k: None)  # build only; no forward here
    model = make_model(num_hidden_layers=3, attn={"layers": [1], "num_heads": 2, "num_kv_heads": 1,
                                                   "window_size": 16})
    assert [b.kind for b in ADAPTER.blocks(model)] == ["linear", "softmax", "linear"]
    assert len(ADAPTER.linear_layers(model)) == 2 and ADAPTER.readout_key_dims(model) == [32, 32]
    softmax = ADAPTER.blocks(model)[1].module
    assert ADAPTER.softmax_cache_bytes(softmax, 100, 2) == 2 * 16 * 1 * 32 * 2   # k and v, last 16 tokens
    keep = random_keep(model, [8, 24])
    pruned = prune_locally(model, keep, ADAPTER.readout_key_dims(model))
    assert pruned.config.head_k_dims == [8, 24]
    assert [a.head_k_dim for a in ADAPTER.linear_layers(pruned)] == [8, 24]
    original = model.state_dict()
    for name, tensor in pruned.state_dict().items():
        if name.startswith("model.layers.1."):
            assert torch.equal(tensor, original[name]), name
