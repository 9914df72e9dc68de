"""Query-noise amplification of a recurrent state S in R^{dk x dv} (fla's K-first convention).

Readout o = scale · Sᵀq with a noisy query q = k + ε, ε ~ N(0, σ² I_dk). What follows are standard
linear-algebra results (SVD S = U diag(s) Vᵀ), derived here, not quoted from the paper:

- noise energy          E‖Sᵀε‖² = σ² ‖S‖_F²
- worst-case gain       sup ‖Sᵀε‖/‖ε‖ = s1
- relative-error bound  ‖Sᵀε‖/‖Sᵀk‖ ≤ κ ‖ε‖/‖k‖, κ = s1/s_r at the numerical rank r, k in span U[:, :r]
- singular direction j  E‖Sᵀε‖²/‖Sᵀk‖² = σ² Σ s_i² / s_j²  for k = U[:, j]
- in-kernel l2 norm     q̂ = (k+ε)/‖k+ε‖, ‖k‖ = 1, d = dk, g = ‖Sᵀk‖², p = ‖S‖_F² − g:
                        E‖Sᵀ(q̂−k)‖² = σ² p − σ⁴ [(d−2) p − ¼(d²−1) g]
                                      + σ⁶ [(d−2)(d−4) p − ⅛(d²−1)(3d−11) g] + O(σ⁸)

The last line (see `renormalized_series`): write ε = a k + ε⊥ (a ~ N(0, σ²), ‖ε⊥‖² = r ~ σ² χ²_{d−1}) and
q̂ = cos θ k + sin θ e with e = ε⊥/‖ε⊥‖ uniform on the sphere of k⊥ and independent of (a, r). Then exactly
E‖Sᵀ(q̂−k)‖² = g E[(1−cos θ)²] + p E[sin² θ]/(d−1) (the cross term has E e = 0), and expanding
cos θ = (1+a)/sqrt((1+a)² + r) in σ with the moments of a and r gives
E[sin² θ]/(d−1) = σ² − (d−2)σ⁴ + (d−2)(d−4)σ⁶ − …, E[(1−cos θ)²] = ¼(d²−1)σ⁴ − ⅛(d²−1)(3d−11)σ⁶ + ….
The first-order term alone (σ² p) misses the ¼(d²−1)σ⁴ g term, which dominates when p ≈ 0 (a key along a
numerically rank-1 state). Each truncation is labelled valid where the first neglected term (its p and g
parts taken in absolute value, so that they cannot cancel) changes the predicted RMS error by at most
`VALIDITY_TOL`; with t = dσ² = 10^(−SNR/10) the second order is then valid for t ≲ 0.13 (SNR ≳ 9 dB) when
g dominates and t ≲ 0.35 (SNR ≳ 4.6 dB) when p dominates; the first order needs t ≲ 0.19 p/(p + dg/4).

The scale factor cancels in every relative error, so it is left out. SNR is per key:
SNR = ‖k‖² / (dk σ²), given in dB, so σ² = ‖k‖² / (dk · 10^(snr/10)). Relative errors for a key with
Sᵀk = 0 are reported as inf (the key cannot be read back at all).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from analysis.errors import AnalysisError
from analysis.linalg.rank import check_state, out_dtype, spectral_metrics

__all__ = [
    "VALIDITY_TOL", "analytic_noise", "analytic_retrieval_error", "monte_carlo_retrieval_error",
    "normalized_first_order", "renormalized_series", "singular_direction_keys",
]

_CHUNK_BYTES = 200 * 2**20  # cap on the Monte-Carlo working set
VALIDITY_TOL = 0.10  # a truncated prediction is "valid" where its first neglected term moves the RMS ≤ 10 %
_SNR_SEARCH_DB = (-60.0, 200.0)  # bracket of the validity search; t = 10^(−SNR/10) from 1e6 down to 1e-20


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
        "numerical_rank": met["numerical_rank"].to(dt),
    }


def _unit_key_energies(S: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, g) = (‖(I − k̂k̂ᵀ)S‖_F², ‖Sᵀk̂‖²) in float64 for unit k̂ = k/‖k‖; S [..., dk, dv], k [..., dk] broadcast.

    p is taken from the projected state, not as ‖S‖_F² − g: for a key along a numerically rank-1 state the
    difference would lose every digit of p, and p is what the first-order term is made of.
    """
    X = S.to(torch.float64)
    kk = k.to(device=X.device, dtype=torch.float64)
    kk = kk / kk.norm(dim=-1, keepdim=True)
    a = (kk.unsqueeze(-2) @ X).squeeze(-2)                   # Sᵀk̂ [..., dv]
    perp = X - kk.unsqueeze(-1) * a.unsqueeze(-2)            # (I − k̂k̂ᵀ) S
    return perp.square().sum(dim=(-2, -1)), a.square().sum(dim=-1)


def _series_terms(p: torch.Tensor, g: torch.Tensor, d: int, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The σ², σ⁴ and σ⁶ terms of E‖Sᵀ(q̂−k)‖² for a unit key (module docstring), u = σ².

    Returns (t1, t2, t3, size2, size3): the terms, and the sizes of t2 and t3 as sums of the absolute values
    of their p and g parts. The error estimates use the sizes, because the two parts can cancel for one
    key (then t2 ≈ 0 although the series has long stopped converging: t = dσ² ≫ 1).
    """
    t1 = u * p
    t2p, t2g = -(d - 2) * u * u * p, 0.25 * (d * d - 1) * u * u * g
    t3p, t3g = (d - 2) * (d - 4) * u ** 3 * p, -0.125 * (d * d - 1) * (3 * d - 11) * u ** 3 * g
    return t1, t2p + t2g, t3p + t3g, t2p.abs() + t2g.abs(), t3p.abs() + t3g.abs()


def _rms_shift(pred: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """Relative RMS error of a truncation whose first neglected term has absolute size `size`.

    1 − sqrt(1 − size/pred): the larger of the two shifts ±size would make to the predicted RMS. inf where
    the truncation is not positive or the neglected term is as large as it (the series has broken down).
    """
    inf = torch.full((), float("inf"), dtype=pred.dtype, device=pred.device)
    x = size / torch.where(pred > 0, pred, torch.ones_like(pred))
    return torch.where((pred > 0) & (x < 1), 1 - (1 - x.clamp(max=1)).sqrt(), inf)


def renormalized_series(S: torch.Tensor, k: torch.Tensor, sigma: float | torch.Tensor) -> dict[str, torch.Tensor]:
    """E‖Sᵀ(q̂−k)‖² for the l2-normalised query q̂ = (k+ε)/‖k+ε‖ to first and second order in σ².

    k [..., dk] is made unit first (as in the kernel); sigma is a float or a tensor broadcasting with the
    result. Returns `first_order`, `second_order` (mean squares) and `first_order_error`,
    `second_order_error`: the relative change of the predicted RMS that the first neglected term would make
    (the size of the truncation error; compare with `VALIDITY_TOL`).
    """
    S = check_state(S)
    k = _check_keys(S, k, name="k", min_ndim=1)
    sig = torch.as_tensor(sigma, dtype=torch.float64)
    if not bool(torch.isfinite(sig).all() & (sig >= 0).all()):
        raise AnalysisError(f"sigma must be finite numbers >= 0, got {sigma!r}.")
    p, g = _unit_key_energies(S, k)
    t1, t2, _, size2, size3 = _series_terms(p, g, S.shape[-2], sig.to(p.device) ** 2)
    dt = out_dtype(S)
    return {"first_order": t1.to(dt), "second_order": (t1 + t2).to(dt),
            "first_order_error": _rms_shift(t1, size2).to(dt), "second_order_error": _rms_shift(t1 + t2, size3).to(dt)}


def _valid_from_snr_db(p: torch.Tensor, g: torch.Tensor, d: int, order: int,
                       tol: float = VALIDITY_TOL) -> torch.Tensor:
    """Lowest SNR (dB) at which the order-1 or order-2 truncation for unit keys is within `tol` (bisection).

    The estimated error grows monotonically as σ grows (the neglected term is of higher order in σ² and the
    kept terms do not grow faster), so the valid SNRs form one interval [result, ∞); inf where never valid.
    """
    d_f = float(d)

    def valid(snr_db: torch.Tensor) -> torch.Tensor:
        u = 10.0 ** (-snr_db / 10.0) / d_f
        t1, t2, _, size2, size3 = _series_terms(p, g, d, u)
        err = _rms_shift(t1, size2) if order == 1 else _rms_shift(t1 + t2, size3)
        return err <= tol

    lo = torch.full_like(p, _SNR_SEARCH_DB[0])
    hi = torch.full_like(p, _SNR_SEARCH_DB[1])
    never = ~valid(hi)
    for _ in range(48):  # bracket 260 dB / 2^48: far below any displayed digit
        mid = (lo + hi) / 2
        ok = valid(mid)
        hi, lo = torch.where(ok, mid, hi), torch.where(ok, lo, mid)
    return torch.where(never, torch.full_like(hi, float("inf")), hi)


def normalized_first_order(S: torch.Tensor, k: torch.Tensor, sigma: float) -> torch.Tensor:
    """First-order E‖Sᵀ(q̂−k)‖² = σ²(‖S‖_F² − ‖Sᵀk‖²) for the l2-normalised query q̂ = (k+ε)/‖k+ε‖.

    k [..., dk] is normalised to unit length first (as in the kernel); leading dims broadcast with S's.
    """
    S = check_state(S)
    k = _check_keys(S, k, name="k", min_ndim=1)
    sigma = _check_sigma(sigma)
    p, _ = _unit_key_energies(S, k)
    return (sigma**2 * p).to(out_dtype(S))


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
                             snr_db: float | Sequence[float] | torch.Tensor,
                             tol: float = VALIDITY_TOL) -> dict[str, torch.Tensor]:
    """Analytic relative RMS retrieval error per key and SNR, to compare with the Monte-Carlo RMS.

    Returns [..., n_keys, n_snr] tensors `rms_error` = σ‖S‖_F/‖Sᵀk‖ (raw keys, no renormalisation; exact);
    for the unit key k̂ and the l2-normalised query, `rms_error_renorm` (first order) and
    `rms_error_renorm2` (second order) = sqrt(E‖Sᵀ(q̂−k̂)‖²)/‖Sᵀk̂‖, their estimated truncation errors
    `renorm_error_est` / `renorm2_error_est` (relative, on the RMS) and `renorm_valid` / `renorm2_valid`
    (estimate ≤ tol); [..., n_keys] `renorm_valid_from_snr_db` / `renorm2_valid_from_snr_db`, the lowest SNR
    at which each truncation is valid (inf: nowhere); the noise levels `sigma` / `sigma_renorm`; `snr_db`.
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
    p, g = _unit_key_energies(X, kk)                                      # [..., n]
    t1, t2, _, size2, size3 = _series_terms(p[..., None], g[..., None], dk, gain * gain)  # [..., n, n_snr]
    err1, err2 = _rms_shift(t1, size2), _rms_shift(t1 + t2, size3)
    unit_sig = (sig / knorm)[..., None]
    dt = out_dtype(S)
    return {
        "rms_error": _ratio(sigma * fro[..., None], sig[..., None]).to(dt),
        "rms_error_renorm": _ratio(t1.sqrt(), unit_sig).to(dt),
        # a truncated mean square below 0 (far outside the validity range) has no RMS: NaN, not 0
        "rms_error_renorm2": _ratio(torch.where(t1 + t2 >= 0, t1 + t2, float("nan")).sqrt(), unit_sig).to(dt),
        "renorm_error_est": err1.to(dt),
        "renorm2_error_est": err2.to(dt),
        "renorm_valid": err1 <= tol,
        "renorm2_valid": err2 <= tol,
        "renorm_valid_from_snr_db": _valid_from_snr_db(p, g, dk, 1, tol).to(dt),
        "renorm2_valid_from_snr_db": _valid_from_snr_db(p, g, dk, 2, tol).to(dt),
        "sigma": sigma.to(dt),
        "sigma_renorm": gain.expand_as(sigma).to(dt),
        "snr_db": snr.to(dt),
    }


def monte_carlo_retrieval_error(S: torch.Tensor, keys: torch.Tensor,
                                snr_db: float | Sequence[float] | torch.Tensor, n_samples: int = 256,
                                renormalize: bool = False,
                                generator: torch.Generator | None = None,
                                before_chunk: Callable[[], None] | None = None) -> dict[str, torch.Tensor]:
    """Monte-Carlo relative retrieval error ‖Sᵀq − Sᵀk‖/‖Sᵀk‖ per key and SNR.

    keys [..., n_keys, dk] (leading dims broadcast with S's). Without `renormalize`, q = k + ε on the
    raw key; with it, k is first made unit and q̂ = (k+ε)/‖k+ε‖ (the in-kernel l2 norm). One draw of
    standard noise per (key, sample) is reused across SNRs (common random numbers: smooth curves).
    Returns [..., n_keys, n_snr] tensors `mean`, `std` (over samples), `mean_sq`, `rms` = sqrt(mean_sq) (to
    compare with the analytic RMS errors: like with like, not the mean), `rms_se` (its standard error, from
    the spread of the squared errors), `sigma`, and `snr_db` [n_snr]. `before_chunk` is called before each chunk of
    (state, key) pairs (about 200 MiB of work): a caller's cancel check raises there, so a stop ends a long call.
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
    mean, std, mean_sq, sq_std = (torch.empty(P, n_snr, dtype=torch.float64, device=dev) for _ in range(4))
    for a in range(0, P, chunk):
        if before_chunk is not None:
            before_chunk()
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
        sq_std[a:b] = rel.square().std(dim=-1, correction=1 if n_samples > 1 else 0)

    dt = out_dtype(S)
    shape = (*batch, n, n_snr)
    return {
        "mean": mean.reshape(shape).to(dt),
        "std": std.reshape(shape).to(dt),
        "mean_sq": mean_sq.reshape(shape).to(dt),
        "rms": mean_sq.sqrt().reshape(shape).to(dt),
        # delta method: se(√m) = se(m) / (2√m)
        "rms_se": _ratio(sq_std / n_samples**0.5, 2 * mean_sq.sqrt()).reshape(shape).to(dt),
        "sigma": sigma.reshape(shape).to(dt),
        "snr_db": snr.to(dt),
    }
