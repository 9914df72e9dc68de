"""transformers' Qwen3.5 text model (Gated DeltaNet 3 : 1 full attention, 2 key heads serving 4 value heads).

`reference_states(model, layer_index, hidden_in)`: layer_index counts linear-attention layers
(adapter.linear_layers order), hidden_in is that layer's input [B,T,D] (after the block's input norm).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from family_cases import FamilyCase


def make_model():
    import analysis  # noqa: F401
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen3_5 import Qwen3_5TextConfig

    from analysis.archs.qwen3_5 import ADAPTER
    ADAPTER.install_routing()
    config = Qwen3_5TextConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], tie_word_embeddings=True,
        max_position_embeddings=256)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # transformers initialises A_log/dt_bias mildly; spread the decay so the gate matters
        for layer in ADAPTER.linear_layers(model):
            layer.A_log.uniform_(-2.0, 1.0)
            layer.dt_bias.uniform_(-1.0, 1.0)
    return model


@torch.no_grad()
def reference_states(model, layer_index: int, hidden_in: torch.Tensor) -> torch.Tensor:
    """All states [B,T,Hv,dk,dv] (K-first) of one Gated DeltaNet layer, token by token, from its definition:
    x → in_proj_qkv → causal depthwise conv1d over q|k|v → SiLU → split q,k,v → l2norm q,k (eps 1e-6) →
    repeat each key head to the Hv/Hk value heads it serves → β = sigmoid(in_proj_b x),
    g = −exp(A_log)·softplus(in_proj_a x + dt_bias) → S_t = e^{g_t} S_{t−1} + k_t (β_t (v_t − S_{t−1}'ᵀ k_t))ᵀ,
    where S_{t−1}' = e^{g_t} S_{t−1}."""
    from analysis.archs.qwen3_5 import ADAPTER
    layer = ADAPTER.linear_layers(model)[layer_index]
    x = hidden_in.float()
    B, T, _ = x.shape
    Hk, Hv, dk, dv = layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
    mixed = x @ layer.in_proj_qkv.weight.float().T                      # [B,T,C]
    w = layer.conv1d.weight.float()[:, 0]                                # [C, K]
    K = w.shape[1]
    conv = torch.zeros_like(mixed)
    for t in range(T):
        for j in range(K):                                               # tap j sees token t − (K−1) + j
            s = t - (K - 1) + j
            if s >= 0:
                conv[:, t] += w[:, j] * mixed[:, s]
    conv = F.silu(conv)
    q, k, v = conv.split([Hk * dk, Hk * dk, Hv * dv], dim=-1)
    q, k = (z.reshape(B, T, Hk, dk) for z in (q, k))
    v = v.reshape(B, T, Hv, dv)
    q, k = (z / torch.sqrt((z * z).sum(-1, keepdim=True) + 1e-6) for z in (q, k))
    group = Hv // Hk
    k = torch.stack([k[:, :, h // group] for h in range(Hv)], dim=2)     # value head h reads key head h // G
    beta = torch.sigmoid(x @ layer.in_proj_b.weight.float().T)           # [B,T,Hv]
    a = x @ layer.in_proj_a.weight.float().T
    g = -layer.A_log.float().exp() * F.softplus(a + layer.dt_bias.float())
    S = x.new_zeros(B, Hv, dk, dv)
    states = []
    for t in range(T):
        S = S * g[:, t].exp()[:, :, None, None]
        kt, vt = k[:, t], v[:, t]
        predicted = torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + kt[..., None] * (beta[:, t, :, None] * (vt - predicted))[:, :, None, :]
        states.append(S.clone())
    return torch.stack(states, dim=1)


def make_sibling(kind: str):
    """The other transformers Gated DeltaNet families the adapter covers, at the same tiny sizes: Qwen3-Next
    (interleaved q|k|v|z), Qwen3.5-MoE and OLMo-hybrid (separate q/k projections, o_norm)."""
    import analysis  # noqa: F401
    from transformers import AutoModelForCausalLM

    from analysis.archs.qwen3_5 import ADAPTER
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


CASE = FamilyCase(name="qwen3_5", make_model=make_model, reference_states=reference_states)
