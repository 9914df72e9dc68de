"""Largest singular value of a delta-rule state after EVERY token, tracked instead of recomputed.

Per sequence and head the state evolves as S_t = g_t S_{t-1} + k_t u_tᵀ with u_t = β_t (v_t − g_t S_{t-1}ᵀk_t),
so its Gram matrix G = SᵀS changes by a rank-two update each token:
    G_t = g² G + (g a + |k|² u) uᵀ + u (g a)ᵀ,   a = S_{t-1}ᵀ k_t.
s1(S_t)² = λ_max(G_t) is found by Rayleigh–Ritz on a small subspace, warm-started from the previous
token: the top `TRACK` Ritz vectors X, whose images G X follow that rank-two update in O(d), plus the
token's own directions u and a. Since every carried vector's residual under the new G lies in
span{x, u, a} (plus its small residual from the previous token), that subspace already holds a block
Krylov step for all of X. u and a are orthonormalised against X before the pass over S that applies
the update, so the same pass also yields their exact images. Tracking more than one vector keeps the
estimate right when the largest singular values cross. Further steps, when needed, add the top two
Ritz residuals; products with G are taken as Sᵀ(S p) in one pass over S, so G itself is never formed.

It stops when the estimated error of the rank utilization u = ‖S‖_F² / (θ d) is below `tol`, by either
bound (∂u/∂θ = −‖S‖_F² / (θ² d)): the quadratic residual bound λ_max − θ ≲ ‖r‖² / (θ₁ − θ₂), with the gap
taken from the Ritz values, or, when that gap is too small to trust, a step that raised θ by less than
`tol` (in u) with a residual below `RESIDUAL_CAP` θ. Ritz values never exceed λ_max (up to float32
rounding), so the error is one-sided.

Cost per token is one pass over the d×d state plus a 5×5 eigenproblem most of the time, instead of an
SVD; the loop is compiled with numba and runs one thread per block of sequences (the kernel releases
the GIL).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

TRACK = 3      # Ritz vectors carried from one token to the next
RESIDUALS = 2  # residual vectors added per step
KEEP = 4       # Ritz vectors kept after each Rayleigh–Ritz step (thick restart)
BASIS = max(KEEP + RESIDUALS, TRACK + 2)  # rows of the subspace, at most
RESIDUAL_CAP = 3e-3  # relative residual below which a stalled θ counts as converged
DEFAULT_TOL = 3e-5   # estimated error of the rank utilization at which tracking stops
_JIT = dict(nogil=True, fastmath=True, cache=True, error_model="numpy")


def _round_robin_pairs() -> tuple[np.ndarray, np.ndarray]:
    """For every size m ≤ BASIS: rounds of disjoint index pairs covering all p < q (circle method)."""
    pairs = np.zeros((BASIS + 1, BASIS, BASIS // 2 + 1, 2), np.int64)
    counts = np.zeros((BASIS + 1, BASIS), np.int64)
    for m in range(2, BASIS + 1):
        n = m + (m & 1)  # even, with a dummy index m when m is odd
        for rnd in range(n - 1):
            for i in range(n // 2):
                p = 0 if i == 0 else 1 + (rnd + i - 1) % (n - 1)
                q = 1 + (rnd + n - 2 - i) % (n - 1)
                p, q = min(p, q), max(p, q)
                if q < m:
                    pairs[m, rnd, counts[m, rnd]] = p, q
                    counts[m, rnd] += 1
    return pairs, counts


_PAIRS, _PAIR_COUNTS = _round_robin_pairs()  # numba freezes these as constants


@njit(inline="always", **_JIT)
def _jacobi(H, m, V, A, rot):
    """Eigen-decomposition of the small symmetric H[:m, :m] by Jacobi rotations: A diagonal, V vectors.

    Rounds of disjoint pairs (round-robin order), so the rotation angles of a round are independent and
    their square roots and divisions overlap. Off-diagonal entries below 1e-4 of the largest diagonal
    entry are left alone: the diagonal entries stay Rayleigh quotients (never above λ_max), they move
    the top eigenvalues by ~1e-8 relative, and what is left enters the Ritz residuals that the stopping
    tests measure (at 1e-3, u was off by up to 1.5e-4 on random-init models). `rot` [3, BASIS] is scratch."""
    for i in range(m):
        for j in range(m):
            A[i, j] = H[i, j]
            V[i, j] = 1.0 if i == j else 0.0
    rounds = m - 1 + (m & 1)
    for _ in range(12):
        rotated = False
        skip = 0.0
        for i in range(m):
            skip = max(skip, abs(A[i, i]))
        skip *= 1e-4
        for rnd in range(rounds):
            count = _PAIR_COUNTS[m, rnd]
            for c in range(count):
                p, q = _PAIRS[m, rnd, c, 0], _PAIRS[m, rnd, c, 1]
                apq = A[p, q]
                if not abs(apq) > skip:
                    rot[0, c] = 0.0
                    continue
                h = (A[q, q] - A[p, p]) / (2.0 * apq)
                t = (1.0 if h >= 0 else -1.0) / (abs(h) + math.sqrt(1.0 + h * h))
                r = math.sqrt(1.0 + t * t)
                rot[0, c], rot[1, c], rot[2, c] = t, t / r, t / (1.0 + r)
                rotated = True
            for c in range(count):
                t, s, tau = rot[0, c], rot[1, c], rot[2, c]
                if t == 0.0:
                    continue
                p, q = _PAIRS[m, rnd, c, 0], _PAIRS[m, rnd, c, 1]
                apq = A[p, q]
                A[p, p] -= t * apq
                A[q, q] += t * apq
                A[p, q] = 0.0
                A[q, p] = 0.0
                for r in range(m):
                    if r != p and r != q:
                        x, y = A[r, p], A[r, q]
                        x2 = x - s * (y + tau * x)
                        y2 = y + s * (x - tau * y)
                        A[r, p] = x2
                        A[p, r] = x2
                        A[r, q] = y2
                        A[q, r] = y2
                    x, y = V[r, p], V[r, q]
                    V[r, p] = x - s * (y + tau * x)
                    V[r, q] = y + s * (x - tau * y)
        if not rotated:
            break


@njit(inline="always", **_JIT)
def _rayleigh_ritz(P, W, m, m_old, theta, H, V, A, P2, W2, used, rot):
    """Ritz pairs of G on span P[:m] (W = G P): P, W become the top min(KEEP, m) Ritz vectors, sorted,
    theta their values. Returns their count and the best Rayleigh quotient among the rows before
    `m_old` (what the step started from). H is always taken afresh from P and W, so nothing rests on
    earlier Ritz vectors being exact."""
    d = P.shape[1]
    for q in range(m):
        for r in range(q + 1):
            c = 0.0
            for j in range(d):
                c += P[r, j] * W[q, j]
            H[r, q] = c
            H[q, r] = c
    before = H[0, 0]
    for q in range(1, m_old):
        before = max(before, H[q, q])
    _jacobi(H, m, V, A, rot)
    kept = min(KEEP, m)
    for i in range(m):
        used[i] = False
    for r in range(kept):
        best = -1
        for i in range(m):
            if not used[i] and (best < 0 or A[i, i] > A[best, best]):
                best = i
        used[best] = True
        theta[r] = A[best, best]
        for j in range(d):
            P2[r, j] = 0.0
            W2[r, j] = 0.0
        for q in range(m):
            c = V[q, best]
            for j in range(d):
                P2[r, j] += c * P[q, j]
                W2[r, j] += c * W[q, j]
    for r in range(kept):
        for j in range(d):
            P[r, j] = P2[r, j]
            W[r, j] = W2[r, j]
    return kept, before


@njit(inline="always", **_JIT)
def _gram_images(S, P, W, q, q2, p32, w32):
    """W[q], W[q2] = SᵀS P[q], SᵀS P[q2] in one pass over the rows of S (float32, as S is)."""
    dk, dv = S.shape
    for j in range(dv):
        p32[0, j] = P[q, j]
        p32[1, j] = P[q2, j]
        w32[0, j] = 0.0
        w32[1, j] = 0.0
    for i in range(dk):
        y1 = np.float32(0.0)
        y2 = np.float32(0.0)
        for j in range(dv):
            s = S[i, j]
            y1 += s * p32[0, j]
            y2 += s * p32[1, j]
        for j in range(dv):
            s = S[i, j]
            w32[0, j] += y1 * s
            w32[1, j] += y2 * s
    for j in range(dv):
        W[q, j] = w32[0, j]
        W[q2, j] = w32[1, j]


@njit(inline="always", **_JIT)
def _orthonormalise(cand, P, m, drop, coef):
    """Classical Gram–Schmidt of `cand` against P[:m] (again if it lost over half its norm: "twice is
    enough") and store it as row m. False when nothing independent is left. `coef` is scratch."""
    d = cand.shape[0]
    before = 0.0
    for j in range(d):
        before += cand[j] * cand[j]
    first = before
    for _ in range(2):
        for r in range(m):  # all projections first: independent dot products
            c = 0.0
            for j in range(d):
                c += cand[j] * P[r, j]
            coef[r] = c
        for r in range(m):
            c = coef[r]
            for j in range(d):
                cand[j] -= c * P[r, j]
        after = 0.0
        for j in range(d):
            after += cand[j] * cand[j]
        if after > 0.5 * before:
            break
        before = after
    if after == 0.0 or after <= drop * first:
        return False
    inv = 1.0 / math.sqrt(after)
    for j in range(d):
        P[m, j] = cand[j] * inv
    return True


@njit(**_JIT)
def _track(k, v, beta, decay, correction, tol, max_steps, lo, hi, fro2, top2, ritz_steps):
    """For the (sequence, head) pairs lo ≤ n < hi of k [B,T,H,dk], v [B,T,H,dv], beta/decay [B,T,H]:
    ‖S_t‖_F² and s1(S_t)² after every token t (S_0 = 0), into fro2/top2/ritz_steps [B, H, T].
    correction 1: the delta rule's u = β(v − g a); 0: plain linear attention u = β v (the Gram update is the same)."""
    T, heads, dk = k.shape[1:]
    dv = v.shape[3]
    for n in range(lo, hi):
        bb, hh = n // heads, n % heads
        S = np.zeros((dk, dv), np.float32)
        P = np.zeros((BASIS, dv))
        W = np.zeros((BASIS, dv))
        P2 = np.zeros((BASIS, dv))
        W2 = np.zeros((BASIS, dv))
        H = np.zeros((BASIS, BASIS))
        A = np.zeros((BASIS, BASIS))
        V = np.zeros((BASIS, BASIS))
        used = np.zeros(BASIS, np.bool_)
        rot = np.zeros((3, BASIS))
        theta = np.zeros(BASIS)
        carried = min(TRACK, dv)  # P[:carried]: the Ritz vectors carried over from the previous token
        for r in range(carried):
            P[r, r] = 1.0  # any orthonormal start: G = 0 until the first write
        a = np.zeros(dv, np.float32)       # Sᵀ k_t for the coming token
        a_next = np.zeros(dv, np.float32)
        u = np.zeros(dv, np.float32)
        p32 = np.zeros((2, dv), np.float32)
        w32 = np.zeros((2, dv), np.float32)
        ga = np.zeros(dv)
        a2 = np.zeros(dv)
        ud = np.zeros(dv)
        cand = np.zeros(dv)
        coef = np.zeros(BASIS)
        for t in range(T):
            g = decay[bb, t, hh]
            b = beta[bb, t, hh]
            kk = 0.0
            for i in range(dk):
                kk += k[bb, t, hh, i] * k[bb, t, hh, i]
            for j in range(dv):
                u[j] = b * (v[bb, t, hh, j] - correction * g * a[j])
                ud[j] = u[j]
                ga[j] = g * a[j]
                a2[j] = ga[j] + kk * ud[j]
            # this token's new directions u and a = Sᵀk (G's update lies in their span), orthonormalised
            # against the carried vectors before the pass over S, so the pass yields their exact images
            m = carried
            for j in range(dv):
                cand[j] = ud[j]
            if _orthonormalise(cand, P, m, 1e-20, coef):
                m += 1
            for j in range(dv):
                cand[j] = a[j]
            if _orthonormalise(cand, P, m, 1e-20, coef):
                m += 1
            for q in range(2):
                for j in range(dv):
                    p32[q, j] = P[carried + q, j] if carried + q < m else 0.0
                    w32[q, j] = 0.0
            for j in range(dv):
                a_next[j] = 0.0
            # S ← g S + k uᵀ, its squared norm, Sᵀ k_{t+1} for the next token and SᵀS of the new
            # directions, in one pass
            nxt = min(t + 1, T - 1)
            f = 0.0
            for i in range(dk):
                ki = k[bb, t, hh, i]
                kn = k[bb, nxt, hh, i]
                rowf = np.float32(0.0)
                y1 = np.float32(0.0)
                y2 = np.float32(0.0)
                for j in range(dv):
                    s = g * S[i, j] + ki * u[j]
                    S[i, j] = s
                    rowf += s * s
                    y1 += s * p32[0, j]
                    y2 += s * p32[1, j]
                    a_next[j] += kn * s
                f += rowf
                for j in range(dv):
                    s = S[i, j]
                    w32[0, j] += y1 * s
                    w32[1, j] += y2 * s
            fro2[bb, hh, t] = f
            for q in range(carried, m):
                for j in range(dv):
                    W[q, j] = w32[q - carried, j]
            for j in range(dv):
                a[j] = a_next[j]
            # the carried Ritz vectors' images follow G's rank-two update:
            # G ← g² G + (g a + |k|² u) uᵀ + u (g a)ᵀ
            g2 = g * g
            for r in range(carried):
                ux = 0.0
                gax = 0.0
                for j in range(dv):
                    ux += ud[j] * P[r, j]
                    gax += ga[j] * P[r, j]
                for j in range(dv):
                    W[r, j] = g2 * W[r, j] + a2[j] * ux + ud[j] * gax
            if not f > 0.0:  # zero state: s1 = 0 (a NaN state gives NaN)
                top2[bb, hh, t] = f
                ritz_steps[bb, hh, t] = 0
                continue
            grown = math.inf
            steps = 0
            while steps < max_steps:
                m0 = m
                if steps > 0:
                    res = 0.0
                    for j in range(dv):
                        x = W[0, j] - theta[0] * P[0, j]
                        res += x * x
                    scale = f / (theta[0] * theta[0] * min(dk, dv))  # |∂u/∂θ|
                    gap = theta[0] - theta[1] if m > 1 else theta[0]
                    if res * scale <= tol * gap:
                        break
                    if grown * scale <= tol and math.sqrt(res) <= RESIDUAL_CAP * theta[0]:
                        break
                    # one block Krylov step: the residuals of the top two vectors, orthonormalised
                    for r in range(min(RESIDUALS, m0)):
                        for j in range(dv):
                            cand[j] = W[r, j] - theta[r] * P[r, j]
                        if _orthonormalise(cand, P, m, 1e-24, coef):
                            m += 1
                    if m == m0:  # an invariant subspace, already solved
                        break
                    for q in range(m0, m, 2):
                        _gram_images(S, P, W, q, min(q + 1, m - 1), p32, w32)
                m, before = _rayleigh_ritz(P, W, m, m0, theta, H, V, A, P2, W2, used, rot)
                grown = theta[0] - before
                steps += 1
            top2[bb, hh, t] = theta[0]
            ritz_steps[bb, hh, t] = steps
            carried = min(TRACK, m)


def track_top_singular(k: np.ndarray, v: np.ndarray, beta: np.ndarray, decay: np.ndarray, *,
                       tol: float = DEFAULT_TOL, max_steps: int = 8,
                       threads: int = 1, correction: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """‖S_t‖_F², s1(S_t)² and the number of Rayleigh–Ritz steps after every token, for k [B,T,H,dk], v [B,T,H,dv],
    beta [B,T,H] and decay [B,T,H] (the multiplicative gate, 1 for DeltaNet), in the layout the
    recurrence kernels take; correction 1: the delta rule, 0: plain linear attention S_t = g S_{t−1} + β k vᵀ
    (Mamba-2), as the caller's recurrence says (analysis.runtime.recurrences).
    Returns three [B, H, T] arrays."""
    k, v, beta, decay = (np.ascontiguousarray(x, np.float32) for x in (k, v, beta, decay))
    B, T, H = beta.shape
    fro2, top2 = np.zeros((B, H, T)), np.zeros((B, H, T))
    steps = np.zeros((B, H, T), np.int32)
    threads = max(1, min(threads, B * H))
    # a few blocks per thread, handed out as threads free up: sequences differ in how long they take
    bounds = np.linspace(0, B * H, min(B * H, 4 * threads) + 1).astype(int)

    def run(lo: int, hi: int) -> None:
        _track(k, v, beta, decay, np.float32(correction), tol, max_steps, lo, hi, fro2, top2, steps)
    if threads == 1:
        run(0, B * H)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, bounds[:-1], bounds[1:]))
    return fro2, top2, steps
