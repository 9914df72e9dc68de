"""Rank utilization u(S_t) = ‖S_t‖_F² / (s1(S_t)² · min(dk, dv)) at EVERY token, without any SVD.

Consecutive states differ by a rank-one update (after the decay), so the dominant right singular
subspace moves little from one token to the next: a block subspace iteration on S_tᵀS_t (block of 8)
with Rayleigh–Ritz, warm-started from the previous token's block, converges in a few steps, at the
rate λ_9/λ_1 rather than the λ_2/λ_1 of plain power iteration (trained states put their energy in a
handful of directions, and s1 ≈ s2 is common). The states are stepped token by token, batched over
sequences and heads, and never stored. Stop when the top Ritz value changes by less than `tol`
relative; Ritz values never exceed s1².
"""
from __future__ import annotations

import torch

from analysis.backend import RecurrenceInputs, observe_recurrences
from analysis.errors import AnalysisError
from analysis.models import attention_layers


def utilization_trace(r: RecurrenceInputs, tol: float = 1e-9, max_iter: int = 100, block: int = 8
                      ) -> dict[str, torch.Tensor]:
    """u, ‖S_t‖_F², s1² after every token: tensors [B, H, T] (float64 states and subspace iteration)."""
    if r.initial_state is not None or r.cu_seqlens is not None:
        raise AnalysisError("The dense rank trace needs whole, unpadded sequences without a prior cache.")
    k, v, beta = r.k.double(), r.v.double(), r.beta.double()
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    p = min(block, dv)
    S = k.new_zeros(B, H, dk, dv)
    X = torch.linalg.qr(torch.randn(dv, p, generator=torch.Generator().manual_seed(0), dtype=k.dtype)).Q
    X = X.expand(B, H, dv, p).contiguous()
    fro2, top2 = k.new_empty(T, B, H), k.new_empty(T, B, H)
    decay = r.g.double().exp() if r.g is not None else None
    iterations = 0
    for t in range(T):
        if decay is not None:
            S = S * decay[:, t, :, None, None]
        kt = k[:, t, :, :, None]                                          # [B,H,dk,1]
        u = beta[:, t, :, None, None] * (v[:, t, :, :, None] - S.transpose(-1, -2) @ kt)
        S = S + kt @ u.transpose(-1, -2)
        lam = None
        for _ in range(max_iter):
            iterations += 1
            Z = S.transpose(-1, -2) @ (S @ X)                              # SᵀS X
            top = torch.linalg.eigvalsh(X.transpose(-1, -2) @ Z)[..., -1]  # Rayleigh–Ritz on span(X)
            X = torch.linalg.qr(Z).Q
            if lam is not None and bool(((top - lam).abs() <= tol * top.abs()).all()):
                lam = top
                break
            lam = top
        top2[t] = lam
        fro2[t] = S.square().sum((-1, -2))
    top2, fro2 = top2.permute(1, 2, 0), fro2.permute(1, 2, 0)
    u = torch.where(top2 > 0, fro2 / top2.clamp(min=1e-30), torch.zeros_like(fro2)) / min(dk, dv)
    return {"rank_utilization": u.float(), "fro_norm_sq": fro2.float(), "spectral_norm_sq": top2.float(),
            "mean_iterations": torch.tensor(iterations / T)}


def collect_utilization_trace(model, input_ids: torch.Tensor, **kwargs) -> list[dict[str, torch.Tensor]]:
    """Run the model once and return, per layer, the dense utilization trace of `utilization_trace`."""
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise AnalysisError("input_ids must be a non-empty [batch, tokens] tensor of token ids.")
    results: list[dict] = []
    with torch.no_grad(), observe_recurrences(lambda r: results.append(utilization_trace(r, **kwargs))):
        model(input_ids.to(next(model.parameters()).device), use_cache=False)
    if len(results) != len(attention_layers(model)):
        raise AnalysisError("Expected one recurrence per layer; this architecture is not supported.")
    return [{name: t.cpu() for name, t in layer.items()} for layer in results]
