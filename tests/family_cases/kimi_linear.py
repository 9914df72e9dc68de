"""transformers' Kimi Linear (`kimi_linear`): 3 KDA blocks + 1 MLA softmax block, 2 heads of dim 16, dense MLP
in block 0 and a small MoE (4 experts, top 2, one shared) elsewhere.

reference_states is written from KDA's definition (the Kimi Linear paper; transformers' KimiLinearDeltaAttention
module layout), not from the project's ops: q|k|v projections, one depthwise causal conv over q|k|v, SiLU,
l2-norm (eps 1e-6 under the root), β = sigmoid(b_proj x), g = −e^{A_log}·softplus(f_b(f_a x) + dt_bias) per head
and key channel, and the state loop S ← Diag(e^g) S, then S ← S + β k (v − Sᵀk)ᵀ.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from family_cases import FamilyCase
from family_cases.fla_reference import conv_silu


def make_config(**overrides):
    from transformers.models.kimi_linear import KimiLinearConfig
    return KimiLinearConfig(**{**dict(
        vocab_size=97, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        n_group=1, topk_group=1, linear_num_heads=2, linear_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], tie_word_embeddings=True,
        max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2), **overrides})


def make_model(**overrides):
    import analysis  # noqa: F401  (CPU routing, pruned_kimi_linear registration)
    from transformers import AutoModelForCausalLM

    from analysis.archs.kimi_linear import ADAPTER
    ADAPTER.install_routing()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(make_config(**overrides)).float().eval()
    with torch.no_grad():  # spread the decays and the router so gates and experts matter at this size
        for layer in ADAPTER.linear_layers(model):
            layer.forget_gate.A_log.uniform_(-2.0, 1.0)
            layer.forget_gate.dt_bias.uniform_(-1.0, 1.0)
        for block in model.model.layers:
            if hasattr(block.mlp, "gate"):
                block.mlp.gate.weight.normal_(0, 0.5)
    return model


def reference_states(model, layer_index: int, hidden_in: torch.Tensor) -> torch.Tensor:
    """All states [B,T,H,dk,dv] (K-first) of KDA layer `layer_index` (counting KDA layers only)."""
    from analysis.archs.kimi_linear import ADAPTER
    attn = ADAPTER.linear_layers(model)[layer_index]
    with torch.no_grad():
        x = hidden_in.float()
        B, T, _ = x.shape
        H, dk, dv = attn.num_heads, ADAPTER.key_dim(attn), ADAPTER.value_dim(attn)
        mixed = torch.cat([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], dim=-1)
        _, k, v = conv_silu(mixed, attn.conv1d.weight).split([H * dk, H * dk, H * dv], dim=-1)
        k = k.reshape(B, T, H, dk)
        k = k / torch.sqrt(k.square().sum(-1, keepdim=True) + 1e-6)
        v = v.reshape(B, T, H, dv)
        gate = attn.forget_gate
        raw = gate.f_b_proj(gate.f_a_proj(x)).view(B, T, H, dk) + gate.dt_bias.float().view(H, dk)
        g = -gate.A_log.float().exp().view(H, 1) * F.softplus(raw)
        beta = torch.sigmoid(attn.b_proj(x))
        S = x.new_zeros(B, H, dk, dv)
        states = []
        for t in range(T):
            S = S * g[:, t].exp()[..., None]
            error = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])
            S = S + beta[:, t, :, None, None] * k[:, t, :, :, None] * error[:, :, None, :]
            states.append(S.clone())
        return torch.stack(states, dim=1)


CASE = FamilyCase(name="kimi_linear", make_model=make_model, reference_states=reference_states)
