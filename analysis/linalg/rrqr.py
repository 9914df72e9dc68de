"""Strong rank-revealing QR column selection (Gu & Eisenstat 1996) for DRRQR channel pruning.

For a sample matrix M [n, d] (rows = calibration tokens, columns = channels) and a budget k, pick k
columns M[:, kept] with M Π = Q R, R = [[A, B], [0, C]] (A k×k) such that every

    ρ_ij = sqrt((A⁻¹B)_ij² + (γ_j/ω_i)²) ≤ f,   γ_j = ‖C[:, j]‖,   1/ω_i = ‖row_i(A⁻¹)‖,

which gives σ_i(A) ≥ σ_i(M)/sqrt(1 + f²k(d−k)) and σ_j(C) ≤ σ_{k+j}(M)·sqrt(1 + f²k(d−k)).

Why it is cheap: the selection depends on M only through R₀, any d×d factor with R₀ᵀR₀ = MᵀM (the
R of M Π is the R of R₀Π). So M is touched once — a Gram/Cholesky factor when a cheap certificate
shows M is well conditioned, else unpivoted Householder QR, both faster than pivoted QR — and
everything else (column pivoting, ρ, swaps, re-triangularisation) works on d×d matrices. The
reference code re-factorises the n×d matrix after every swap (defect B6); `reference_rrqr`
re-implements that approach for benchmarking only.

Termination: swapping kept column i with column k+j multiplies |det A| by exactly ρ_ij (Gu–Eisenstat,
Lemma 3.1). We swap only when ρ_ij > f > 1, so |det A| grows by a factor > f per swap, and it is
bounded by the product of the k largest column norms (Hadamard), so at most
log_f(∏ top-k column norms / |det A₀|) swaps can happen in exact arithmetic; `max_swaps=None` uses
that bound plus d as slack against rounding, and the result says if the cap was reached.

Rank-deficient M (numerical rank r < k): no k columns give a nonsingular A, so the condition is
enforced on the first r kept columns (ρ at split r) and the other k − r are filled from the remaining
pivot order (they only add numerically null directions). `rank` in the result tells you.
Never imports streamlit.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import torch

from analysis.errors import AnalysisError

__all__ = ["RRQRResult", "strong_rrqr", "strong_rrqr_batched", "reference_rrqr", "rho_matrix",
           "kahan_matrix", "kahan_test_matrix"]


@dataclass(frozen=True)
class RRQRResult:
    kept: np.ndarray       # [k] original column indices, in pivot order (not sorted)
    order: np.ndarray      # [d] full column permutation Π; order[:k] == kept
    swaps: int             # Gu–Eisenstat swaps done after the initial column-pivoted QR
    max_rho: float         # final max ρ_ij at split min(k, rank); 0 when that split is d (no B, C)
    f: float
    sigma_min_kept: float  # σ_min(A) = σ_min(M[:, kept])
    converged: bool        # True iff the swaps stopped because max_rho ≤ f
    rank: int              # numerical rank of M used for the split (see module doc)
    rho_qrcp: float        # max ρ of plain column-pivoted QR, before any swap
    stop_reason: str       # "converged", "max_swaps" or (reference only) "singular_A"


# ----------------------------------------------------------------------------------- validation

def _as_tensor(M: object, ndim: int, name: str) -> torch.Tensor:
    """M as a float64 torch tensor of the given ndim, finite and non-empty, or AnalysisError."""
    what = "[n, d]" if ndim == 2 else "[heads, n, d]"
    if isinstance(M, torch.Tensor):
        T, ok = M.detach(), not (M.is_complex() or M.dtype == torch.bool)
    else:
        try:
            A = np.asarray(M)
        except (TypeError, ValueError):
            A = np.asarray(None)
        ok = A.dtype.kind in "iuf"
        T = torch.from_numpy(A.astype(np.float64, copy=not A.flags.writeable)) if ok else None
    if not ok:
        raise AnalysisError(f"{name} must be a real numeric array of shape {what}, got {type(M).__name__} "
                            f"of dtype {getattr(M, 'dtype', 'object')}; pass float samples.")
    if T.ndim != ndim or 0 in T.shape:
        raise AnalysisError(f"{name} must be a non-empty {ndim}-D array of shape {what}, got shape {tuple(T.shape)}.")
    T = T.to(torch.float64)
    # A finite sum proves there is no NaN/Inf (they propagate); only an overflowing sum needs the full check.
    if not (bool(torch.isfinite(T.sum())) or bool(torch.isfinite(T).all())):
        raise AnalysisError(f"{name} contains NaN or Inf entries; drop or repair those samples before the column selection.")
    return T


def _check_args(k: object, f: object, d: int, max_swaps: object) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= d:
        raise AnalysisError(f"k must be an integer between 1 and the number of columns d={d}, got {k!r}.")
    if isinstance(f, bool) or not isinstance(f, (int, float, np.floating, np.integer)) or not (1 < f < math.inf):
        raise AnalysisError(f"f must be a finite number greater than 1 (1.5 is usual), got {f!r}.")
    if max_swaps is not None and (isinstance(max_swaps, bool) or not isinstance(max_swaps, (int, np.integer))
                                  or max_swaps < 0):
        raise AnalysisError(f"max_swaps must be None or a non-negative integer, got {max_swaps!r}.")


# ------------------------------------------------------------------------------------ the core

# Threads: the work is a chain of small LAPACK calls. OpenMP regions of 2+ threads stall badly
# whenever another process holds a core (measured 10-80x slower on a shared 2-core machine), while
# one thread costs at most ~25% on an idle one, so the public functions (input checks included: even
# torch's elementwise ops are threaded) run torch at TORCH_THREADS threads (the process-wide setting
# is restored on exit; None leaves it alone). LAPACK calls go through
# torch (MKL) except the d×d pivoted QR, which only scipy offers.
TORCH_THREADS: int | None = 1


@contextlib.contextmanager
def _torch_threads():
    old = torch.get_num_threads()
    change = TORCH_THREADS is not None and TORCH_THREADS != old
    if change:
        torch.set_num_threads(TORCH_THREADS)
    try:
        yield
    finally:
        if change:
            torch.set_num_threads(old)


def _t(x):
    """numpy <-> torch without copying (float64, contiguous)."""
    return x.numpy() if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))


# Cholesky of the Gram matrix gives R with relative errors up to ~n·eps·κ², so it is trusted only
# when κ_F(R) = ‖R‖_F·‖R⁻¹‖_F ≤ GRAM_KAPPA_MAX certifies κ₂(M) ≤ 1e3 (errors < 1e-6; a Gram
# matrix that lost the small singular values cannot pass: σ_min(R)² ≤ σ_min(M)² + O(n·eps)·σ_1²).
# Otherwise (ill-conditioned, rank-deficient, n < d) Householder QR, which is backward stable.
# Set GRAM_KAPPA_MAX = 0 to always use Householder.
GRAM_KAPPA_MAX = 1e3


def _r_factor(T: torch.Tensor) -> np.ndarray:
    """d×d R factor(s) with RᵀR = TᵀT for T [..., n, d] (on T's device), zero-padded if n < d."""
    *batch, n, d = T.shape
    Tb = T.reshape(-1, n, d)
    R = torch.zeros(Tb.shape[0], d, d, dtype=T.dtype, device=T.device)
    todo = list(range(Tb.shape[0]))
    if n >= d and GRAM_KAPPA_MAX > 0:
        Rc = torch.linalg.cholesky_ex(Tb.mT @ Tb).L.mT  # ~n·d² flops, half of Householder, all BLAS-3
        eye = torch.eye(d, dtype=T.dtype, device=T.device).expand_as(Rc)
        Rinv = torch.linalg.solve_triangular(Rc, eye, upper=True)  # inf/NaN where Cholesky broke down
        good = torch.linalg.matrix_norm(Rc) * torch.linalg.matrix_norm(Rinv) <= GRAM_KAPPA_MAX  # NaN: False
        R[good] = Rc[good]
        todo = (~good).nonzero().flatten().tolist()
    for i in todo:  # one 2-D QR per matrix: torch's batched QR is ~2x slower here
        Rh = torch.linalg.qr(Tb[i], mode="r").R  # [min(n, d), d]
        R[i, : Rh.shape[0]] = Rh
    return R.reshape(*batch, d, d).cpu().numpy()


def rho_matrix(R: np.ndarray, k: int) -> np.ndarray:
    """ρ [k, d−k] for the split of the upper-triangular R at k: |det| growth of each swap (i, k+j).

    Non-finite entries (a numerically singular A) come back as +inf, meaning "swap needed".
    """
    R = np.asarray(R, dtype=np.float64)
    d = R.shape[1]
    A = R[:k, :k]
    if k >= d:
        return np.zeros((k, 0))
    if not np.all(np.diag(A)):  # exactly singular A: every swap has infinite gain
        return np.full((k, d - k), np.inf)
    with np.errstate(all="ignore"):
        # One triangular solve gives both W = A⁻¹B and A⁻¹ (for the row norms 1/ω_i).
        X = _t(torch.linalg.solve_triangular(_t(A), _t(np.hstack([R[:k, k:], np.eye(k)])), upper=True))
        W, inv_omega = X[:, : d - k], np.linalg.norm(X[:, d - k:], axis=1)
        gamma = np.linalg.norm(R[k:, k:], axis=0)
        term = np.outer(inv_omega, gamma)
        term[:, gamma == 0] = 0.0  # a column already in span(A) adds nothing, even if ‖A⁻¹‖ overflowed
        rho = np.hypot(W, term)     # hypot: no overflow from squaring
    rho[~np.isfinite(rho)] = np.inf
    return rho


def _sigma_min(A: np.ndarray) -> float:
    return float(torch.linalg.svdvals(_t(A))[-1])


def _swap_bound(R: np.ndarray, k: int, f: float) -> int:
    """Exact-arithmetic swap cap log_f(∏ top-k column norms / |det A₀|) (Hadamard bound on |det A|)."""
    if k == 0:
        return 0
    norms = np.sort(np.linalg.norm(R, axis=0))[::-1][:k]
    with np.errstate(divide="ignore"):
        gap = np.log(norms).sum() - np.log(np.abs(np.diag(R)[:k])).sum()
    return int(min(max(math.ceil(gap / math.log(f)), 0), 10**6)) if np.isfinite(gap) else 10**6


def _select(R0: np.ndarray, n: int, k: int, f: float, max_swaps: int | None) -> RRQRResult:
    """Strong RRQR on the d×d factor R0 of M (M = Q₀R₀)."""
    d = R0.shape[1]
    # QRCP of R0 = QRCP of M: pivoting only sees the column norms of Schur complements, i.e. MᵀM = R0ᵀR0.
    R, order = sla.qr(R0, mode="r", pivoting=True, check_finite=False)
    R = np.ascontiguousarray(R)
    diag = np.abs(np.diag(R))
    # Numerical rank from the pivoted diagonal: |r_ii| ≥ ‖R[i:, i:]‖₂/sqrt(d−i), so no direction above
    # the tolerance is declared null.
    rank = int((diag > np.finfo(np.float64).eps * max(n, d) * diag[0]).sum()) if diag[0] > 0 else 0
    kk = min(k, rank)  # the split the condition can be enforced at
    cap = _swap_bound(R, kk, f) + d if max_swaps is None else int(max_swaps)

    swaps, rho0 = 0, None
    while True:
        rho = rho_matrix(R, kk) if 0 < kk < d else np.zeros((kk, 0))
        max_rho = float(rho.max()) if rho.size else 0.0
        rho0 = max_rho if rho0 is None else rho0
        if max_rho <= f:
            reason = "converged"
            break
        if swaps >= cap:
            reason = "max_swaps"
            break
        i, j = np.unravel_index(int(np.argmax(rho)), rho.shape)
        j += kk
        R[:, [i, j]] = R[:, [j, i]]
        order[[i, j]] = order[[j, i]]
        # Columns < i are still triangular with zeros below row i, so only R[i:, i:] needs a new QR:
        # an O((d−i)³) d×d-sized step instead of re-factorising the n×d matrix.
        R[i:, i:] = _t(torch.linalg.qr(_t(R[i:, i:]), mode="r").R)
        swaps += 1

    sigma = _sigma_min(R[:k, :k])
    order = order.astype(np.int64)
    return RRQRResult(kept=order[:k].copy(), order=order, swaps=swaps, max_rho=max_rho, f=float(f),
                      sigma_min_kept=sigma, converged=reason == "converged", rank=rank,
                      rho_qrcp=rho0, stop_reason=reason)


# ---------------------------------------------------------------------------------- public API

@_torch_threads()
def strong_rrqr(M: object, k: int, f: float = 1.5, max_swaps: int | None = None) -> RRQRResult:
    """Strong RRQR selection of k of the d columns of one sample matrix M [n, d] (numpy or torch).

    Works in float64. `max_swaps=None` means the exact-arithmetic bound plus d (see module doc);
    `stop_reason == "max_swaps"` flags a run that hit the cap before max ρ ≤ f.
    """
    T = _as_tensor(M, 2, "M")
    n, d = T.shape
    _check_args(k, f, d, max_swaps)
    return _select(_r_factor(T), n, int(k), float(f), max_swaps)


@_torch_threads()
def strong_rrqr_batched(Ms: object, k: int, f: float = 1.5, max_swaps: int | None = None) -> list[RRQRResult]:
    """`strong_rrqr` for every head of Ms [heads, n, d]: one batched n×d QR, then per-head d×d work."""
    T = _as_tensor(Ms, 3, "Ms")
    _, n, d = T.shape
    _check_args(k, f, d, max_swaps)
    return [_select(R0, n, int(k), float(f), max_swaps) for R0 in _r_factor(T)]


@_torch_threads()  # only for the shared input checks and final bookkeeping; the method is scipy
def reference_rrqr(M: object, k: int, f: float = 1.5, max_swaps: int = 20,
                   dtype: type = np.float32) -> RRQRResult:
    """The reference code's approach (src/key_reduction/pruners/rrqr.py), for benchmarking ONLY.

    Faithful to it: float32, scipy QRCP with Q formed, a full n×d `qr(M[:, Π])` after every swap,
    stop when min|diag A| < 1e-9, explicit A⁻¹ by a triangular solve with I, ω with +1e-12, at most
    20 swaps. Row subsampling to 5000 is the caller's job. Only k == d, where the original would fail
    on an empty ρ, returns at once. `max_rho` and `rho_qrcp` are recomputed exactly (float64) so that
    they compare with `strong_rrqr`'s; `rank` is not estimated (min(n, d)).
    """
    M = _as_tensor(M, 2, "M").numpy().astype(dtype)
    n, d = M.shape
    _check_args(k, f, d, max_swaps)
    max_swaps = 20 if max_swaps is None else max_swaps
    _, R, P = sla.qr(M, pivoting=True, mode="economic")
    if n < d:  # zero rows make R square (the original would crash on a non-square A instead)
        R = np.vstack([R, np.zeros((d - n, d), R.dtype)])
    rho0 = float(rho_matrix(R.astype(np.float64), k).max(initial=0.0))
    swaps, reason = 0, "max_swaps"
    for _ in range(max_swaps if k < d else 0):
        A, B = R[:k, :k], R[:k, k:]
        if np.abs(np.diag(A)).min() < 1e-9:
            reason = "singular_A"
            break
        W = sla.solve_triangular(A, B, lower=False)
        A_inv = sla.solve_triangular(A, np.eye(k), lower=False)
        omega = 1.0 / (np.linalg.norm(A_inv, axis=1) + 1e-12)
        gamma = np.linalg.norm(R[k:, k:], axis=0) if R.shape[0] > k else np.zeros(d - k)
        rho = np.sqrt(np.abs(W) ** 2 + np.outer(1.0 / omega, gamma) ** 2)
        if rho.max() <= f:
            reason = "converged"
            break
        i, j = np.unravel_index(np.argmax(rho), rho.shape)
        P[i], P[k + j] = P[k + j], P[i]
        _, R = sla.qr(M[:, P], mode="economic")  # the full re-factorisation (defect B6)
        if n < d:
            R = np.vstack([R, np.zeros((d - n, d), R.dtype)])
        swaps += 1
    if k == d:
        reason = "converged"
    R64, P = R.astype(np.float64), P.astype(np.int64)
    max_rho = float(rho_matrix(R64, k).max(initial=0.0))
    sigma = _sigma_min(R64[:k, :k])
    return RRQRResult(kept=P[:k].copy(), order=P, swaps=swaps, max_rho=max_rho, f=float(f),
                      sigma_min_kept=sigma, converged=reason == "converged", rank=min(n, d),
                      rho_qrcp=rho0, stop_reason=reason)


# ------------------------------------------------------------------------------ test matrices

def kahan_matrix(d: int, theta: float, tau: float = 0.0) -> np.ndarray:
    """Kahan's d×d matrix diag(1, s, …, s^{d−1})·(I − c·strict_upper(1)), s = sin θ, c = cos θ.

    All its columns have norm 1, so column pivoting meets only ties, and in the natural order it
    fails to reveal the rank: |r_dd| = s^{d−1} is far above σ_min. Scaling column j by (1−τ)^j
    (τ > 0, as in the RRQR literature) breaks the ties towards that order; with τ = 0 rounding breaks
    them instead and scipy's QRCP mostly escapes (max ρ ≈ 1–2 at d = 128), hence τ = 1e-6 in
    `kahan_test_matrix`.
    """
    s, c = math.sin(theta), math.cos(theta)
    K = np.eye(d) - c * np.triu(np.ones((d, d)), 1)
    return (s ** np.arange(d))[:, None] * K * ((1.0 - tau) ** np.arange(d))[None, :]


def kahan_test_matrix(n: int, d: int, theta: float, seed: int = 0, tau: float = 1e-6,
                      blocks: int = 1) -> np.ndarray:
    """[n, d] = (seeded random orthonormal n×d basis Q) @ K, so M's R factor is K (up to signs).

    K = kahan_matrix(d, θ, τ), or with blocks > 1 the block-diagonal of `blocks` Kahan matrices of
    size d/blocks (columns scaled by (1−τ)^j): each block defeats QRCP on its own, so strong RRQR
    then needs about one swap per block.
    """
    if blocks == 1:
        K = kahan_matrix(d, theta, tau)
    else:
        K = sla.block_diag(*[kahan_matrix(d // blocks, theta) for _ in range(blocks)])
        K = K * ((1.0 - tau) ** np.arange(d))[None, :]
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, d)))
    return Q @ K
