"""fla Kimi Delta Attention (`kda`): grouped value heads (2 key heads, 4 value heads), per-channel decay.

reference_states is written from KDA's definition (fla/layers/kda.py, the Kimi Linear paper), not from the
project's ops: projections, a depthwise causal conv over the last W tokens, SiLU, l2-norm (eps 1e-6 under
the root, as fla's kernels), β = sigmoid, the per-value-head, per-key-channel gate
g = −e^{A_log}·softplus(f_proj x + dt_bias) (lower_bound·sigmoid(e^{A_log}(…)) when the layer has a lower
bound), and the state loop S ← Diag(e^g) S, then S ← S + β k (v − Sᵀk)ᵀ with value head j reading key head
j // (Hv/Hk).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from family_cases import FamilyCase
from family_cases.fla_reference import conv_silu


def make_model(**overrides):
    import analysis  # noqa: F401  (CPU routing, pruned_kda registration)
    from fla.models import KDAConfig
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    config = KDAConfig(**{**dict(hidden_size=64, num_hidden_layers=2, num_heads=2, num_v_heads=4, head_dim=32,
                                 expand_v=1.0, vocab_size=256, tie_word_embeddings=True), **overrides})
    return AutoModelForCausalLM.from_config(config).eval()


def reference_states(model, layer_index: int, hidden_in: torch.Tensor) -> torch.Tensor:
    """All states [B,T,Hv,dk,dv] (K-first) of KDA layer `layer_index` (counting KDA layers only)."""
    from analysis.archs.kda import ADAPTER
    attn = ADAPTER.linear_layers(model)[layer_index]
    with torch.no_grad():
        x = hidden_in.float()
        B, T, _ = x.shape
        Hk, Hv, dk, dv = attn.num_heads, attn.num_v_heads, attn.head_k_dim, attn.head_v_dim
        if attn.use_short_conv:  # the state needs k and v only (q reads it out)
            k = conv_silu(attn.k_proj(x), attn.k_conv1d.weight, attn.k_conv1d.bias)
            v = conv_silu(attn.v_proj(x), attn.v_conv1d.weight, attn.v_conv1d.bias)
        else:
            k, v = F.silu(attn.k_proj(x)), F.silu(attn.v_proj(x))
        l2 = lambda z: z / torch.sqrt(z.square().sum(-1, keepdim=True) + 1e-6)  # noqa: E731
        k = l2(k.view(B, T, Hk, dk))
        v = v.view(B, T, Hv, dv)
        raw = attn.f_proj(x).view(B, T, Hv, dk) + attn.dt_bias.view(Hv, dk)
        rate = attn.A_log.float().exp().view(Hv, 1)
        if attn.lower_bound is not None:
            g = attn.lower_bound * torch.sigmoid(rate * raw)
        else:
            g = -rate * F.softplus(raw)
        beta = torch.sigmoid(attn.b_proj(x)) * (2.0 if attn.allow_neg_eigval else 1.0)
        group = Hv // Hk
        S = x.new_zeros(B, Hv, dk, dv)
        states = []
        for t in range(T):
            S = S * g[:, t].exp()[..., None]
            for j in range(Hv):
                kj = k[:, t, j // group]                                    # [B, dk]
                error = v[:, t, j] - torch.einsum("bkv,bk->bv", S[:, j], kj)
                S[:, j] = S[:, j] + beta[:, t, j, None, None] * kj[:, :, None] * error[:, None, :]
            states.append(S.clone())
        return torch.stack(states, dim=1)


CASE = FamilyCase(name="kda", make_model=make_model, reference_states=reference_states)
