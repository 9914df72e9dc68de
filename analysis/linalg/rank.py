"""Spectral metrics of recurrent states S in R^{dk x dv} (fla's K-first convention).

Every metric is a function of the singular values s1 >= ... >= sm (m = min(dk, dv)), taken in float64
with one batched call over all leading dims, by the cheapest exact route for the input:
- float64 input: `torch.linalg.svdvals` (full accuracy, every singular value to ~1e-16·s1);
- lower-precision input (the float32 states of a forward pass): `eigvalsh` of the smaller Gram matrix
  (S Sᵀ or Sᵀ S) in float64, s_i = sqrt(max(λ_i, 0)). Its absolute error, ~sqrt(m·eps64)·s1 ≈ 1e-7·s1 at
  worst for s_i near 0 (relative ~1e-14·(s1/s_i)² above), is at the level of the input's own float32
  rounding and four orders below the numerical rank's default threshold τ = 1e-3 (an eigenvalue ratio of
  1e-6). Measured on 128×128 states (the 340M/1.3B fla shape), 48 per call, median of 7, one thread, on a
  shared 2-core host: svdvals 1.45 ms per matrix, Gram + eigvalsh 0.97 ms (1.5× faster); with two threads
  on the busy host svdvals 19 ms vs 6 ms. `method="svd"` or `"gram"` forces either route.
  On the CPU, LAPACK's own threads do not help matrices this small (one layer's 264 states of the 340M
  shape: 225 ms with two threads in one call, 191 ms with one), so a large batch is split across
  `torch.get_num_threads()` worker threads that run one LAPACK thread each (115 ms on 2 cores). Every
  matrix is computed by one single-threaded call however the batch is split, so results do not depend on
  the batch or the thread count.

Conventions:
- zero state (S == 0): every rank, the utilization, the condition number and both norms are 0
  (the reference code's u(0) = 0); kappa is undefined there and reported as 0 so that averages
  over tokens stay finite;
- non-finite state (any NaN/Inf in one matrix): all of that matrix's metrics are NaN, the other
  matrices are unaffected, and one `NonFiniteStateWarning` says how many there were;
- outputs are float64 for float64 input, float32 otherwise; the integer-valued ranks are returned
  as floats so they average cleanly.
"""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import torch

from analysis.errors import AnalysisError

__all__ = ["METRIC_INFO", "MetricInfo", "NonFiniteStateWarning", "check_state", "out_dtype", "spectral_metrics"]


class NonFiniteStateWarning(UserWarning):
    """Some state matrices held NaN or Inf; their metrics are NaN."""


class MetricInfo(NamedTuple):
    label: str
    formula: str  # LaTeX, without surrounding $
    description: str


METRIC_INFO: dict[str, MetricInfo] = {
    "stable_rank": MetricInfo(
        "Stable rank", r"\mathrm{sr}(S)=\sum_i s_i^2 / s_1^2",
        "Squared Frobenius norm over squared spectral norm; between 1 and rank(S)."),
    "rank_utilization": MetricInfo(
        "Rank utilization", r"u(S)=\mathrm{sr}(S)/\min(d_k,d_v)",
        "Stable rank as a fraction of the largest possible rank (the reference code's metric)."),
    "effective_rank": MetricInfo(
        "Effective rank (Roy-Vetterli)", r"\mathrm{erank}(S)=\exp\left(-\sum_i p_i\log p_i\right),\ p_i=s_i/\sum_j s_j",
        "Exponential of the entropy of the normalised singular values."),
    "participation_ratio": MetricInfo(
        "Participation ratio", r"\mathrm{PR}(S)=\left(\sum_i s_i^2\right)^2/\sum_i s_i^4",
        "How many singular directions share the energy, weighted by squared singular values."),
    "numerical_rank": MetricInfo(
        "Numerical rank", r"\mathrm{rank}_\tau(S)=\#\{i : s_i>\tau\, s_1\}",
        "Number of singular values above a fraction tau of the largest."),
    "energy_rank": MetricInfo(
        "Energy rank", r"\min\{r : \sum_{i\le r} s_i^2 \ge e\sum_i s_i^2\}",
        "Fewest singular directions holding a fraction e (default 0.95) of the energy."),
    "condition_number": MetricInfo(
        "Condition number (numerical rank)", r"\kappa_\tau(S)=s_1/s_{\mathrm{rank}_\tau(S)}",
        "Largest over smallest singular value kept by the numerical rank; 0 for a zero state."),
    "fro_norm": MetricInfo(
        "Frobenius norm", r"\|S\|_F=\sqrt{\sum_i s_i^2}", "Root of the total energy of the state."),
    "spectral_norm": MetricInfo(
        "Spectral norm", r"\|S\|_2=s_1", "Largest singular value: the worst-case readout gain."),
}


def check_state(S: object, name: str = "S") -> torch.Tensor:
    """Return S if it is a real tensor of shape [..., dk, dv] with dk, dv >= 1, else raise AnalysisError."""
    if not isinstance(S, torch.Tensor):
        raise AnalysisError(f"{name} must be a torch tensor of shape [..., dk, dv], got {type(S).__name__}; convert it with torch.as_tensor.")
    if S.ndim < 2 or S.shape[-1] < 1 or S.shape[-2] < 1:
        raise AnalysisError(f"{name} must have shape [..., dk, dv] with dk, dv >= 1, got shape {tuple(S.shape)}.")
    if S.is_complex():
        raise AnalysisError(f"{name} must be real, got dtype {S.dtype}; pass its real part or magnitude.")
    return S


def out_dtype(S: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else is reported in float32."""
    return torch.float64 if S.dtype == torch.float64 else torch.float32


METHODS = ("auto", "svd", "gram")


def _gram_eigenvalues(S: torch.Tensor, finite: torch.Tensor | None) -> torch.Tensor:
    """Ascending eigenvalues [..., m] of the smaller float64 Gram of S; matrices with finite False count as 0."""
    X = S.to(torch.float64)
    if finite is not None:
        X = torch.where(finite[..., None, None], X, torch.zeros((), dtype=X.dtype, device=X.device))
    gram = X @ X.mT if X.shape[-2] <= X.shape[-1] else X.mT @ X  # the smaller one: m × m
    del X  # the float64 copy is not needed by the eigensolver (which copies the Gram once more)
    return torch.linalg.eigvalsh(gram)


PARALLEL_MIN = 32  # matrices per call below which one call is as fast as splitting
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()  # one split call at a time: the thread count is process-wide while it runs


def _one_lapack_thread(part: torch.Tensor, finite: torch.Tensor | None) -> torch.Tensor:
    torch.set_num_threads(1)  # this worker thread's own OpenMP/MKL setting (the caller restores the process's)
    return _gram_eigenvalues(part, finite)


def _gram_eigenvalues_cpu(S: torch.Tensor, finite: torch.Tensor | None) -> torch.Tensor:
    global _pool
    threads = torch.get_num_threads()
    batch = S.shape[:-2].numel()
    if threads < 2 or batch < PARALLEL_MIN:
        return _gram_eigenvalues(S, finite)
    flat = S.reshape(batch, *S.shape[-2:])
    flat_finite = None if finite is None else finite.reshape(batch)
    bounds = [batch * i // threads for i in range(threads + 1)]
    with _pool_lock:
        if _pool is None or _pool._max_workers < threads:
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="spectral")
        try:
            parts = list(_pool.map(
                lambda lo_hi: _one_lapack_thread(flat[lo_hi[0]:lo_hi[1]],
                                                 None if flat_finite is None else flat_finite[lo_hi[0]:lo_hi[1]]),
                zip(bounds[:-1], bounds[1:])))
        finally:
            torch.set_num_threads(threads)
    return torch.cat(parts).reshape(*S.shape[:-2], -1)


def singular_values(S: torch.Tensor, method: str, finite: torch.Tensor | None = None) -> torch.Tensor:
    """Descending float64 singular values [..., m] of S [..., dk, dv] (see the module docstring); matrices
    whose `finite` entry is False are treated as zero (their caller reports NaN for them)."""
    if method == "svd":
        X = S.to(torch.float64)
        if finite is not None:
            X = torch.where(finite[..., None, None], X, torch.zeros((), dtype=X.dtype, device=X.device))
        return torch.linalg.svdvals(X)
    eig = _gram_eigenvalues_cpu(S, finite) if S.device.type == "cpu" else _gram_eigenvalues(S, finite)
    return eig.flip(-1).clamp(min=0).sqrt()  # ascending → descending; rounding < 0 → 0


def spectral_metrics(S: torch.Tensor, tau: float = 1e-3, energy: float = 0.95,
                     method: str = "auto") -> dict[str, torch.Tensor]:
    """Rank metrics of S [..., dk, dv] → dict of [...] tensors (plus `singular_values` [..., m]).

    tau: relative threshold of the numerical rank (s_i > tau·s1); energy: fraction for the energy rank;
    method: "auto" (svd for float64 input, the float64 Gram otherwise), "svd" or "gram".
    """
    S = check_state(S)
    if not 0.0 <= tau < 1.0:
        raise AnalysisError(f"tau must be in [0, 1), got {tau}.")
    if not 0.0 < energy <= 1.0:
        raise AnalysisError(f"energy must be in (0, 1], got {energy}.")
    if method not in METHODS:
        raise AnalysisError(f"method must be one of {', '.join(METHODS)}, got {method!r}.")
    if method == "auto":
        method = "svd" if S.dtype == torch.float64 else "gram"
    m = min(S.shape[-2], S.shape[-1])
    S = S.detach()

    # svdvals can raise or return garbage on NaN/Inf: zero those matrices out, NaN their results after.
    # For lower-precision S a float64 sum is NaN/Inf exactly when an entry is (their range cannot overflow
    # it), and costs one read of S instead of a boolean copy of it.
    finite = torch.isfinite(S).all(dim=-1).all(dim=-1) if S.dtype == torch.float64 else \
        torch.isfinite(S.sum(dim=(-2, -1), dtype=torch.float64))
    n_bad = int((~finite).sum())
    if n_bad:
        warnings.warn(f"{n_bad} of {finite.numel()} state matrices contain NaN or Inf; their metrics are NaN.",
                      NonFiniteStateWarning, stacklevel=2)

    s = singular_values(S, method, finite if n_bad else None)  # [..., m], descending, float64
    s1 = s[..., 0]
    zero = s1 == 0
    one = torch.ones((), dtype=s.dtype, device=s.device)
    s1_safe = torch.where(zero, one, s1)  # every ratio below is 0 for a zero state: numerators are 0

    s2 = s * s
    cum = torch.cumsum(s2, dim=-1)
    fro2 = cum[..., -1]  # same sum as the cumsum, so energy_rank with energy=1 is exact
    stable = fro2 / (s1_safe * s1_safe)

    p = s / torch.where(zero, one, s.sum(dim=-1))[..., None]
    erank = torch.where(zero, 0.0, torch.exp(-torch.special.xlogy(p, p).sum(dim=-1)))  # xlogy: 0·log0 = 0

    s4 = (s2 * s2).sum(dim=-1)
    pr = fro2 * fro2 / torch.where(zero, one, s4)

    nrank = (s > tau * s1[..., None]).sum(dim=-1)  # 0 for a zero state (0 > 0 is false)
    # energy rank: 1 + number of prefixes still below the target; clamp guards rounding at energy=1
    erank_e = ((cum < energy * fro2[..., None]).sum(dim=-1) + 1).clamp(max=m)
    erank_e = torch.where(zero, 0, erank_e)

    s_r = s.gather(-1, (nrank - 1).clamp(min=0)[..., None]).squeeze(-1)
    kappa = torch.where(zero, 0.0, s1 / torch.where(zero, one, s_r))

    out = {
        "stable_rank": stable,
        "rank_utilization": stable / m,
        "effective_rank": erank,
        "participation_ratio": pr,
        "numerical_rank": nrank.to(s.dtype),
        "energy_rank": erank_e.to(s.dtype),
        "condition_number": kappa,
        "fro_norm": torch.sqrt(fro2),
        "spectral_norm": s1,
        "singular_values": s,
    }
    dt = out_dtype(S)
    nan = torch.full((), float("nan"), dtype=s.dtype, device=s.device)
    for key, v in out.items():
        if n_bad:
            v = torch.where(finite[..., None] if key == "singular_values" else finite, v, nan)
        out[key] = v.to(dt)
    return out
