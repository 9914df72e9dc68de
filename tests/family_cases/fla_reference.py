"""Token-by-token references for fla's DeltaNet and Gated DeltaNet layers, written from their definitions
(not from the project's code): projections, causal depthwise short convolution + SiLU, l2 norm, β, the
Gated DeltaNet decay, grouped value heads. States are K-first [dk, dv]."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def short_conv(x: torch.Tensor, conv) -> torch.Tensor:
    """y_t = act(Σ_w W[c, w] · x_{t−W+1+w} + b) per channel c, zero before the first token. x [B, T, C]."""
    w = conv.weight.detach().double()[:, 0]                       # [C, W]
    width = w.shape[1]
    padded = F.pad(x.transpose(1, 2), (width - 1, 0))             # [B, C, T+W-1]
    y = torch.stack([(padded[:, :, t:t + width] * w).sum(-1) for t in range(x.shape[1])], dim=1)
    if conv.bias is not None:
        y = y + conv.bias.detach().double()
    return F.silu(y) if conv.activation in ("silu", "swish") else y


def conv_silu(y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [B,T,C] through a depthwise causal conv (taps weight[c, 0, :], the last tap on the current token), SiLU."""
    w = weight[:, 0].float()
    width = w.shape[-1]
    out = []
    for t in range(y.shape[1]):
        window = y[:, max(0, t - width + 1):t + 1]
        value = (window * w[:, width - window.shape[1]:].T).sum(1)
        out.append(F.silu(value + (bias.float() if bias is not None else 0)))
    return torch.stack(out, dim=1)


def l2(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(x.square().sum(-1, keepdim=True) + 1e-6)


def delta_rule_loop(q, k, v, beta, log_decay=None) -> torch.Tensor:
    """S_t = a_t S_{t−1} + β_t k_t (v_t − (a_t S_{t−1})ᵀ k_t)ᵀ per head; returns every S_t [B, T, H, dk, dv]."""
    B, T, H, dk = k.shape
    S = torch.zeros(B, H, dk, v.shape[-1], dtype=torch.float64)
    out = []
    for t in range(T):
        if log_decay is not None:
            S = S * log_decay[:, t].exp()[..., None, None]
        kt, vt, bt = k[:, t], v[:, t], beta[:, t]
        S = S + bt[..., None, None] * kt[..., :, None] * (vt - torch.einsum("bhkv,bhk->bhv", S, kt))[..., None, :]
        out.append(S)
    return torch.stack(out, dim=1)


def fla_layer_states(layer, x: torch.Tensor) -> torch.Tensor:
    """All states of one fla DeltaNet / GatedDeltaNet layer for its input x [B, T, D] (double precision)."""
    from fla.layers import GatedDeltaNet
    x = x.detach().double()
    W = lambda lin: lin.weight.detach().double()                  # noqa: E731
    q, k, v = x @ W(layer.q_proj).T, x @ W(layer.k_proj).T, x @ W(layer.v_proj).T
    if layer.use_short_conv:
        q, k, v = short_conv(q, layer.q_conv1d), short_conv(k, layer.k_conv1d), short_conv(v, layer.v_conv1d)
    B, T, _ = x.shape
    H, dk, dv = layer.num_heads, layer.head_k_dim, layer.head_v_dim
    Hv = getattr(layer, "num_v_heads", None) or H
    q, k, v = q.view(B, T, H, dk), k.view(B, T, H, dk), v.view(B, T, Hv, dv)
    gated = isinstance(layer, GatedDeltaNet)
    if gated or getattr(layer, "qk_norm", "l2") == "l2":
        q, k = l2(q), l2(k)
    beta = torch.sigmoid(x @ W(layer.b_proj).T) if getattr(layer, "use_beta", True) else torch.ones(B, T, Hv).double()
    if layer.allow_neg_eigval:
        beta = beta * 2
    decay = None
    if gated:
        a = x @ W(layer.a_proj).T + layer.dt_bias.detach().double()
        decay = -layer.A_log.detach().double().exp() * F.softplus(a)        # [B, T, Hv]
    group = Hv // H                                                         # key head h serves value heads h·g …
    k = k.repeat_interleave(group, dim=2)
    return delta_rule_loop(None, k, v, beta, decay)
