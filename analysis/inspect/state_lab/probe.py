"""Query noise at one token: read key k_j from S_t with q = k_j + ε at a given SNR, against analysis.linalg.noise's bounds.

The error is the Query-noise page's: ‖Sᵀq − Sᵀk‖/‖Sᵀk‖ (relative to the clean readout, not to w_j), the
scale cancels. SNR = ‖k‖²/(dk σ²) in dB. "raw": q = k + ε, whose RMS σ‖S‖_F/‖Sᵀk‖ is exact; "re-normalised":
q̂ = (k+ε)/‖k+ε‖ as the in-kernel l2 norm does, predicted by a first/second-order series that is labelled
valid only where its first neglected term moves the RMS by at most analysis.linalg.noise.VALIDITY_TOL.
Given the written value w_j, the noisy retrieval error against it is exact too (ε is zero-mean):
E‖Sᵀ(k+ε) − w‖² = ‖Sᵀk − w‖² + σ²‖S‖_F², so its RMS is sqrt(e_{t,j}² + σ²‖S‖_F²/‖w‖²).
"""
from __future__ import annotations

import torch

from analysis.linalg import noise
from analysis.errors import AnalysisError

SNR_GRID = tuple(float(s) for s in range(-10, 41, 2))  # dB: the curve the chosen SNR is marked on


def noise_probe(S: torch.Tensor, key: torch.Tensor, snr_db: float, n_samples: int = 256, seed: int = 0,
                grid=SNR_GRID, written: torch.Tensor | None = None) -> dict:
    """Curves over `grid` plus the chosen `snr_db`: Monte-Carlo RMS (raw, re-normalised) and the bounds; with
    `written` (w_j), also the exact RMS retrieval error against it, `retrieval_raw`."""
    if not -40.0 <= float(snr_db) <= 80.0:
        raise AnalysisError(f"SNR must lie between −40 and 80 dB, got {snr_db}.")
    if float(key.norm()) == 0:
        raise AnalysisError("This token's key is zero, so nothing can be read from it; pick another token.")
    snrs = sorted(set(grid) | {float(snr_db)})
    S64, keys = S.double()[None], key.double()[None, None]      # one state, one key
    bound = noise.analytic_retrieval_error(S64, keys, snrs)
    gen = torch.Generator().manual_seed(seed)
    raw = noise.monte_carlo_retrieval_error(S64, keys, snrs, n_samples, renormalize=False, generator=gen)
    gen = torch.Generator().manual_seed(seed)
    renorm = noise.monte_carlo_retrieval_error(S64, keys, snrs, n_samples, renormalize=True, generator=gen)
    pick = lambda d, name: d[name][0, 0].tolist()  # noqa: E731  [n_snr]
    out = {"snr_db": snrs, "mc_raw": pick(raw, "rms"), "mc_renorm": pick(renorm, "rms"),
           "bound_raw": pick(bound, "rms_error"), "first_order": pick(bound, "rms_error_renorm"),
           "second_order": pick(bound, "rms_error_renorm2"), "first_valid": pick(bound, "renorm_valid"),
           "second_valid": pick(bound, "renorm2_valid"),
           "first_valid_from_db": float(bound["renorm_valid_from_snr_db"][0, 0]),
           "second_valid_from_db": float(bound["renorm2_valid_from_snr_db"][0, 0])}
    names = ["mc_raw", "mc_renorm", "bound_raw", "first_order", "second_order", "first_valid", "second_valid"]
    if written is not None and float(written.norm()) > 0:
        X, k, w = S.double(), key.double(), written.double()
        sigma = k.norm() * 10.0 ** (-torch.tensor(snrs, dtype=torch.float64) / 20.0) / S.shape[-2] ** 0.5
        clean = (X.T @ k - w).norm()
        out["retrieval_raw"] = ((clean ** 2 + sigma ** 2 * X.square().sum()).sqrt() / w.norm()).tolist()
        names.append("retrieval_raw")
    i = snrs.index(float(snr_db))
    out["at"] = {name: out[name][i] for name in names}
    return out


def validity_label(valid: bool, valid_from_db: float) -> str:
    """The Query-noise page's wording: where a truncated prediction can be believed."""
    if valid_from_db == float("inf"):
        return "never valid for this key"
    return f"valid (from {valid_from_db:.1f} dB)" if valid else f"outside validity (valid from {valid_from_db:.1f} dB)"
