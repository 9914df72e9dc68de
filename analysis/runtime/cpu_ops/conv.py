"""Causal depthwise short convolution with fla's cache layout.

The cache holds the last W inputs (pre-convolution) of each channel, [N, D, W], newest at index W−1;
y_t = act(Σ_w weight[d, w] · x_{t−W+1+w} + bias). Computed in fp32, returned in the input dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    activation: str | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x [B,T,D], weight [D,W], initial_state [N,D,W] → (y [B,T,D], final state [N,D,W] or None)."""
    if cu_seqlens is not None:  # packed sequences (B == 1): each one starts from its own cache
        bounds = cu_seqlens.tolist()
        parts = [
            causal_conv1d(x[:, s:e], weight, bias,
                          None if residual is None else residual[:, s:e],
                          None if initial_state is None else initial_state[n:n + 1],
                          output_final_state, activation)
            for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:]))
        ]
        y = torch.cat([p[0] for p in parts], dim=1)
        return y, (torch.cat([p[1] for p in parts]) if output_final_state else None)

    B, T, D = x.shape
    W = weight.shape[-1]
    history = (initial_state.float() if initial_state is not None
               else x.new_zeros(B, D, W, dtype=torch.float32))
    xt = torch.cat([history, x.float().transpose(1, 2)], dim=-1)          # [B, D, W + T]
    y = F.conv1d(xt[..., 1:], weight.float()[:, None, :],
                 None if bias is None else bias.float(), groups=D)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"unsupported short-convolution activation {activation!r}")
    y = y.transpose(1, 2)
    if residual is not None:
        y = y + residual.float()
    final = xt[..., -W:].to(x.dtype) if output_final_state else None
    return y.to(x.dtype), final
