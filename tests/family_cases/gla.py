"""fla Gated Linear Attention (`gla`): 2 layers, 2 heads, dk 16 ≠ dv 32, short convs, per-channel decay.

reference_states is written from GLA's definition (fla/layers/gla.py, the GLA paper), not from the project's ops:
projections, a depthwise causal conv over the last W tokens with SiLU, no l2 norm, the decay
g = logsigmoid(gk_proj x) / gate_logit_normalizer per head and key channel, and the state loop
S ← Diag(e^g) S + k vᵀ (K-first).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from family_cases import FamilyCase, layer_input
from family_cases.fla_reference import conv_silu

SIZES = dict(hidden_size=64, num_hidden_layers=2, num_heads=2, expand_k=0.5, expand_v=1.0, use_short_conv=True,
             vocab_size=256, tie_word_embeddings=True)


def make_model(seed: int = 0, **overrides):
    import analysis  # noqa: F401  (CPU routing, pruned_gla registration)
    from fla.models import GLAConfig
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(GLAConfig(**{**SIZES, **overrides})).eval()
    with torch.no_grad():  # decays spread over (0, 1) per channel and token, not all ≈ 0.96 as at fla's init, and
        for block in model.model.layers:  # attention that moves the logits (fla's std 0.02 init barely does)
            attn = block.attn
            if not hasattr(attn, "gk_proj"):   # a hybrid's softmax block
                continue
            attn.gk_proj[0].weight.normal_(0, 0.3)
            attn.gk_proj[1].weight.normal_(0, 1.0)
            attn.gk_proj[1].bias.normal_(0, 2.0)
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj):
                proj.weight.normal_(0, 0.2)
    return model


def reference_states(model, layer_index: int, hidden_in: torch.Tensor) -> torch.Tensor:
    """All states [B,T,H,dk,dv] (K-first) of GLA layer `layer_index`."""
    from analysis.archs.gla import ADAPTER
    attn, x = layer_input(ADAPTER, model, layer_index, hidden_in)
    with torch.no_grad():
        B, T, _ = x.shape
        H, dk, dv = attn.num_heads, attn.head_k_dim, attn.head_v_dim
        if attn.use_short_conv:  # the state needs k and v only (q reads it out)
            k = conv_silu(attn.k_proj(x), attn.k_conv1d.weight, attn.k_conv1d.bias)
            v = conv_silu(attn.v_proj(x), attn.v_conv1d.weight, attn.v_conv1d.bias)
        else:
            k, v = attn.k_proj(x), attn.v_proj(x)
        k, v = k.view(B, T, H, dk), v.view(B, T, H, dv)
        g = F.logsigmoid(attn.gk_proj(x).view(B, T, H, dk)) / attn.gate_logit_normalizer
        if attn.clamp_min is not None:
            g = g.clamp_min(attn.clamp_min)
        S = x.new_zeros(B, H, dk, dv)
        states = []
        for t in range(T):
            S = g[:, t].exp()[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
            states.append(S.clone())
        return torch.stack(states, dim=1)


CASE = FamilyCase(name="gla", make_model=make_model, reference_states=reference_states)
