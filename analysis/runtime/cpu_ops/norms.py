"""RMSNorm, LayerNorm and GroupNorm (with fla's residual/prenorm options), gated RMSNorm, SwiGLU and cross-entropy
in torch.

Math and dtypes follow fla's Triton kernels: statistics in fp32, output in the input dtype, the
pre-norm residual in the residual's dtype (fp32 when `residual_in_fp32`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x, weight, bias=None, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False,
             gate=None, activation="swish", centred=False, groups=1):
    """fla's RMSNorm / FusedRMSNormGated; centred=True: its LayerNorm; groups > 1: its GroupNorm (the statistics
    of each of `groups` equal slices of the last dim on their own)."""
    res_dtype = residual.dtype if residual is not None else (torch.float32 if residual_in_fp32 else x.dtype)
    h = x.float() if residual is None else x.float() + residual.float()
    y = _normalised(h, eps) if groups == 1 and not centred else _normalised_groups(h, eps, centred, groups)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    if gate is not None:
        g = gate.float()
        if activation in ("swish", "silu"):
            y = y * F.silu(g)
        elif activation == "sigmoid":
            y = y * torch.sigmoid(g)
        else:
            raise ValueError(f"unsupported gate activation {activation!r}")
    y = y.to(x.dtype)
    return (y, h.to(res_dtype)) if prenorm else y


def _normalised(h, eps):
    return h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)


def _normalised_groups(h, eps, centred, groups):
    """Each of `groups` slices of the last dim normalised on its own, after subtracting its mean when `centred`
    (kept apart from `_normalised`, so RMSNorm's autograd graph, and its gradients to the last bit, stay as they were)."""
    z = h.unflatten(-1, (groups, -1))
    if centred:
        z = z - z.mean(-1, keepdim=True)
    return _normalised(z, eps).flatten(-2)


def cross_entropy(logits, target, ignore_index=-100, label_smoothing=0.0, logit_scale=1.0,
                  lse_square_scale=0.0, reduction="mean"):
    """fla's FusedCrossEntropyLoss: CE over scaled fp32 logits plus an optional z-loss."""
    logits = logits.float() * logit_scale
    loss = F.cross_entropy(logits, target, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction="none")
    if lse_square_scale:
        valid = target != ignore_index
        loss = loss + lse_square_scale * torch.logsumexp(logits, -1).square() * valid
    if reduction == "none":
        return loss
    total = loss.sum()
    return total / (target != ignore_index).sum() if reduction == "mean" else total
