"""Query-noise amplification of a recurrent state S in R^{dk x dv} (fla's K-first convention).

Readout o = scale · Sᵀq with a noisy query q = k + ε, ε ~ N(0, σ² I_dk). The paper's theorem text is
not available; what follows are standard linear-algebra results (SVD S = U diag(s) Vᵀ), not quotes:

- noise energy          E‖Sᵀε‖² = σ² ‖S‖_F²
- worst-case gain       sup ‖Sᵀε‖/‖ε‖ = s1
- relative-error bound  ‖Sᵀε‖/‖Sᵀk‖ ≤ κ ‖ε‖/‖k‖, κ = s1/s_r at the numerical rank r, k in span U[:, :r]
- singular direction j  E‖Sᵀε‖²/‖Sᵀk‖² = σ² Σ s_i² / s_j²  for k = U[:, j]
- in-kernel l2 norm     q̂ = (k+ε)/‖k+ε‖, ‖k‖ = 1, first order: E‖Sᵀ(q̂−k)‖² ≈ σ² (‖S‖_F² − ‖Sᵀk‖²)

The scale factor cancels in every relative error, so it is left out. SNR is per key:
SNR = ‖k‖² / (dk σ²), given in dB, so σ² = ‖k‖² / (dk · 10^(snr/10)). Relative errors for a key with
Sᵀk = 0 are reported as inf (the key cannot be read back at all).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .errors import AnalysisError
from .rank import check_state, out_dtype, spectral_metrics

__all__ = [
    "analytic_noise", "analytic_retrieval_error", "monte_carlo_retrieval_error",
    "normalized_first_order", "singular_direction_keys",
]

_CHUNK_BYTES = 200 * 2**20  # cap on the Monte-Carlo working set


def _check_sigma(sigma: float) -> float:
    sigma = float(sigma)
    if not (sigma >= 0.0 and sigma < float("inf")):
        raise AnalysisError(f"sigma must be a finite number >= 0, got {sigma}.")
    return sigma


def _check_keys(S: torch.Tensor, keys: object, name: str = "keys", min_ndim: int = 2) -> torch.Tensor:
    shape = "[..., n_keys, dk]" if min_ndim == 2 else "[..., dk]"
    if not isinstance(keys, torch.Tensor) or keys.ndim < min_ndim or keys.is_complex():
        got = tuple(keys.shape) if isinstance(keys, torch.Tensor) else type(keys).__name__
        raise AnalysisError(f"{name} must be a real torch tensor of shape {shape}, got {got}.")
    if keys.shape[-1] != S.shape[-2]:
        raise AnalysisError(f"{name} have dk={keys.shape[-1]} but the state has dk={S.shape[-2]}; "
                            "pass keys from the same layer and head (K-first state [dk, dv]).")
    return keys


def _snr_tensor(snr_db: float | Sequence[float] | torch.Tensor) -> torch.Tensor:
    snr = torch.as_tensor(snr_db, dtype=torch.float64).reshape(-1).cpu()
    if snr.numel() == 0 or not torch.isfinite(snr).all():
        raise AnalysisError(f"snr_db must be one or more finite numbers (dB), got {snr_db!r}.")
    return snr


def _broadcast_batch(S: torch.Tensor, keys: torch.Tensor) -> tuple[int, ...]:
    try:
        return tuple(torch.broadcast_shapes(S.shape[:-2], keys.shape[:-2]))
    except RuntimeError:
        raise AnalysisError(f"The leading dims of the state {tuple(S.shape[:-2])} and the keys "
                            f"{tuple(keys.shape[:-2])} do not broadcast; give one key set per state.") from None


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num/den with den == 0 → inf (NaN still propagates from non-finite states)."""
    inf = torch.full((), float("inf"), dtype=num.dtype, device=num.device)
    return torch.where(den == 0, inf, num / torch.where(den == 0, torch.ones_like(den), den))


def analytic_noise(S: torch.Tensor, sigma: float = 1.0, tau: float = 1e-3) -> dict[str, torch.Tensor]:
    """Closed-form noise figures of S [..., dk, dv]: noise_energy, worst_case_gain, kappa [...],
    direction_gain [..., m] (Σ s_i²/s_j², multiply by σ² for the expected squared relative error of
    key U[:, j]; inf where s_j = 0) and singular_values [..., m]."""
    S = check_state(S)
    sigma = _check_sigma(sigma)
    met = spectral_metrics(S.to(torch.float64), tau=tau)  # float64 so the gains keep their precision
    s, fro = met["singular_values"], met["fro_norm"]
    dt = out_dtype(S)
    return {
        "noise_energy": (sigma**2 * fro * fro).to(dt),
        "worst_case_gain": met["spectral_norm"].to(dt),
        "kappa": met["condition_number"].to(dt),
        "direction_gain": _ratio((fro * fro)[..., None].expand_as(s), s * s).to(dt),
        "singular_values": s.to(dt),
    }


def normalized_first_order(S: torch.Tensor, k: torch.Tensor, sigma: float) -> torch.Tensor:
    """First-order E‖Sᵀ(q̂−k)‖² = σ²(‖S‖_F² − ‖Sᵀk‖²) for the l2-normalised query q̂ = (k+ε)/‖k+ε‖.

    k [..., dk] is normalised to unit length first (as in the kernel); leading dims broadcast with S's.
    """
    S = check_state(S)
    k = _check_keys(S, k, name="k", min_ndim=1)
    sigma = _check_sigma(sigma)
    X = S.to(torch.float64)
    kk = k.to(device=X.device, dtype=torch.float64)
    kk = kk / kk.norm(dim=-1, keepdim=True)
    fro2 = X.square().sum(dim=(-2, -1))
    sig2 = (kk.unsqueeze(-2) @ X).squeeze(-2).square().sum(dim=-1)
    return (sigma**2 * (fro2 - sig2).clamp(min=0)).to(out_dtype(S))  # clamp: rounding can dip below 0


def singular_direction_keys(S: torch.Tensor, j_list: int | Sequence[int]) -> torch.Tensor:
    """Left singular vectors U[:, j] of S = U diag(s) Vᵀ (0-based j, descending s) as keys [..., len(j_list), dk]."""
    S = check_state(S)
    j = torch.as_tensor([j_list] if isinstance(j_list, int) else list(j_list), dtype=torch.long)
    m = min(S.shape[-2], S.shape[-1])
    if j.numel() == 0 or j.min() < 0 or j.max() >= m:
        raise AnalysisError(f"j_list must hold 0-based indices in [0, {m - 1}], got {j_list!r}.")
    X = S.detach().to(torch.float64)
    if not torch.isfinite(X).all():
        raise AnalysisError("The state contains NaN or Inf, so it has no singular directions; pick a finite state.")
    U = torch.linalg.svd(X, full_matrices=False).U  # [..., dk, m]
    return U[..., :, j.to(U.device)].mT.to(out_dtype(S)).contiguous()


def analytic_retrieval_error(S: torch.Tensor, keys: torch.Tensor,
                             snr_db: float | Sequence[float] | torch.Tensor) -> dict[str, torch.Tensor]:
    """Analytic relative retrieval error per key and SNR, to plot next to the Monte-Carlo estimate.

    Returns [..., n_keys, n_snr] tensors `rms_error` = σ‖S‖_F/‖Sᵀk‖ (raw keys, no renormalisation;
    exact) and `rms_error_renorm` = σ̂ sqrt(‖S‖_F² − ‖Sᵀk̂‖²)/‖Sᵀk̂‖ (unit k̂, l2-normalised query; first
    order), the noise levels `sigma` / `sigma_renorm` that each used, and `snr_db` [n_snr].
    """
    S = check_state(S)
    keys = _check_keys(S, keys)
    _broadcast_batch(S, keys)
    snr = _snr_tensor(snr_db)
    dk = S.shape[-2]
    X = S.to(torch.float64).unsqueeze(-3)  # [..., 1, dk, dv] against keys [..., n, dk]
    kk = keys.to(device=X.device, dtype=torch.float64)
    knorm = kk.norm(dim=-1)
    if (knorm == 0).any():
        raise AnalysisError("Every key must have a non-zero norm; drop the zero keys.")
    fro = X.square().sum(dim=(-2, -1)).sqrt()  # [..., 1]
    sig = (kk.unsqueeze(-2) @ X).squeeze(-2).norm(dim=-1)  # ‖Sᵀk‖, [..., n]
    gain = 10.0 ** (-snr.to(X.device) / 20.0) / dk**0.5  # σ/‖k‖ per SNR
    sigma = knorm[..., None] * gain
    first = normalized_first_order(X, kk, 1.0)  # float64 in, float64 out; per unit σ², [..., n]
    dt = out_dtype(S)
    return {
        "rms_error": _ratio(sigma * fro[..., None], sig[..., None]).to(dt),
        "rms_error_renorm": _ratio(gain * first.sqrt()[..., None], (sig / knorm)[..., None]).to(dt),
        "sigma": sigma.to(dt),
        "sigma_renorm": gain.expand_as(sigma).to(dt),
        "snr_db": snr.to(dt),
    }


def monte_carlo_retrieval_error(S: torch.Tensor, keys: torch.Tensor,
                                snr_db: float | Sequence[float] | torch.Tensor, n_samples: int = 256,
                                renormalize: bool = False,
                                generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Monte-Carlo relative retrieval error ‖Sᵀq − Sᵀk‖/‖Sᵀk‖ per key and SNR.

    keys [..., n_keys, dk] (leading dims broadcast with S's). Without `renormalize`, q = k + ε on the
    raw key; with it, k is first made unit and q̂ = (k+ε)/‖k+ε‖ (the in-kernel l2 norm). One draw of
    standard noise per (key, sample) is reused across SNRs (common random numbers: smooth curves).
    Returns [..., n_keys, n_snr] tensors `mean`, `std` (over samples), `mean_sq` (to compare with
    `analytic_retrieval_error(...)["rms_error"]**2`), `sigma`, and `snr_db` [n_snr].
    """
    S = check_state(S)
    keys = _check_keys(S, keys)
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise AnalysisError(f"n_samples must be an integer >= 1, got {n_samples!r}.")
    batch = _broadcast_batch(S, keys)
    snr = _snr_tensor(snr_db)
    dk, dv = S.shape[-2], S.shape[-1]
    n, n_snr = keys.shape[-2], snr.numel()
    dev = S.device

    X = S.detach().to(torch.float64).expand(*batch, dk, dv).reshape(-1, dk, dv)  # [B, dk, dv]
    K = keys.detach().to(device=dev, dtype=torch.float64).expand(*batch, n, dk).reshape(-1, dk)  # [B*n, dk]
    knorm = K.norm(dim=-1)
    if (knorm == 0).any():
        raise AnalysisError("Every key must have a non-zero norm; drop the zero keys.")
    if renormalize:
        K, knorm = K / knorm[:, None], torch.ones_like(knorm)
    sigma = knorm[:, None] * (10.0 ** (-snr.to(dev) / 20.0) / dk**0.5)  # [P, n_snr]
    state_of = torch.arange(X.shape[0], device=dev).repeat_interleave(n)  # pair → its state

    P = K.shape[0]
    per_pair = 8 * (dk * dv + n_samples * dk + 3 * n_snr * n_samples * (dk + dv))  # float64 working set
    chunk = max(1, _CHUNK_BYTES // per_pair)
    gen_dev = generator.device if generator is not None else dev
    mean, std, mean_sq = (torch.empty(P, n_snr, dtype=torch.float64, device=dev) for _ in range(3))
    for a in range(0, P, chunk):
        b = min(P, a + chunk)
        Xc, kc, sc = X[state_of[a:b]], K[a:b], sigma[a:b]
        z = torch.randn(b - a, n_samples, dk, generator=generator, dtype=torch.float64, device=gen_dev).to(dev)
        eps = sc[:, :, None, None] * z[:, None]  # [c, n_snr, n_samples, dk]
        if renormalize:
            q = kc[:, None, None, :] + eps
            diff = q / q.norm(dim=-1, keepdim=True) - kc[:, None, None, :]
        else:
            diff = eps  # q − k exactly; no cancellation
        err = (diff.reshape(b - a, -1, dk) @ Xc).norm(dim=-1).reshape(b - a, n_snr, n_samples)
        rel = _ratio(err, (kc.unsqueeze(1) @ Xc).norm(dim=-1)[:, :, None])  # ‖Sᵀk‖ [c, 1, 1]
        mean[a:b] = rel.mean(dim=-1)
        std[a:b] = rel.std(dim=-1, correction=1 if n_samples > 1 else 0)
        mean_sq[a:b] = rel.square().mean(dim=-1)

    dt = out_dtype(S)
    shape = (*batch, n, n_snr)
    return {
        "mean": mean.reshape(shape).to(dt),
        "std": std.reshape(shape).to(dt),
        "mean_sq": mean_sq.reshape(shape).to(dt),
        "sigma": sigma.reshape(shape).to(dt),
        "snr_db": snr.to(dt),
    }
