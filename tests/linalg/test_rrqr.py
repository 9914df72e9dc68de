"""analysis.linalg.rrqr against independent numpy oracles: ρ from a fresh QR, singular values from an SVD."""

import numpy as np
import pytest
import torch

from analysis.linalg import rrqr
from analysis.errors import AnalysisError
from analysis.linalg.rrqr import (kahan_test_matrix, reference_rrqr, strong_rrqr,
                           strong_rrqr_batched)

F = 1.5


def oracle_rho(M, order, k, R=None):
    """max ρ_ij at split k, from numpy's QR of M[:, order] and an explicit inverse."""
    R = np.linalg.qr(np.asarray(M, np.float64)[:, order], mode="r") if R is None else R
    d = R.shape[1]
    if k == d:
        return 0.0
    A, B, C = R[:k, :k], R[:k, k:], R[k:, k:]
    Ainv = np.linalg.inv(A)
    rho = np.sqrt((Ainv @ B) ** 2 + np.outer(np.linalg.norm(Ainv, axis=1), np.linalg.norm(C, axis=0)) ** 2)
    return rho.max()


def svals(X):
    return np.linalg.svd(np.asarray(X, np.float64), compute_uv=False)


def check_strong(M, res, k, f=F):
    """The Gu–Eisenstat guarantees, checked from scratch at split r = min(k, rank)."""
    M = np.asarray(M, np.float64)
    d = M.shape[1]
    assert res.kept.shape == (k,) and len(set(res.kept.tolist())) == k
    assert sorted(res.order.tolist()) == list(range(d)) and (res.order[:k] == res.kept).all()
    r = min(k, res.rank)
    assert res.converged and res.stop_reason == "converged"
    R = np.linalg.qr(M[:, res.order], mode="r")                  # fresh, independent factorisation
    assert oracle_rho(M, res.order, r, R) <= f * (1 + 1e-6)
    bound = np.sqrt(1 + f**2 * r * (d - r))
    s = svals(M)
    s_kept = svals(M[:, res.kept[:r]])
    assert (s_kept >= s[:r] / bound * (1 - 1e-9)).all()          # σ_i(A) ≥ σ_i(M)/sqrt(1+f²r(d−r))
    if r < d:                                                    # σ_j(C) ≤ σ_{r+j}(M)·sqrt(1+f²r(d−r))
        sC = svals(R[r:, r:])
        tol = 1e-12 * s[0] * np.sqrt(d)                          # rounding floor for null directions
        assert (sC <= s[r:r + len(sC)] * bound * (1 + 1e-9) + tol).all()
    if r == k:
        assert np.isclose(res.sigma_min_kept, s_kept[-1], rtol=1e-6, atol=1e-12 * s[0])


rng = np.random.default_rng(0)
MATRICES = {
    "random": rng.standard_normal((160, 48)),
    "scaled_columns": rng.standard_normal((160, 48)) * np.logspace(0, -6, 48)[rng.permutation(48)],
    "low_rank_plus_noise": rng.standard_normal((160, 6)) @ rng.standard_normal((6, 48))
                           + 1e-6 * rng.standard_normal((160, 48)),
    "kahan": kahan_test_matrix(160, 64, 1.3, seed=1),
    "rank_deficient": rng.standard_normal((160, 10)) @ rng.standard_normal((10, 48)),
    "wide_n_lt_d": rng.standard_normal((20, 48)),
}


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("k", [1, 8, 24, 47])
def test_strong_rrqr_guarantees(name, k):
    M = MATRICES[name]
    res = strong_rrqr(M, k, F)
    check_strong(M, res, k)
    expected_rank = {"rank_deficient": 10, "wide_n_lt_d": 20}.get(name, M.shape[1])
    if name != "kahan":  # Kahan's σ_min is below rounding, so only its QRCP-diagonal rank is defined
        assert res.rank == expected_rank


def test_rank_deficient_fills_k_with_null_columns():
    M = MATRICES["rank_deficient"]
    res = strong_rrqr(M, 30, F)
    assert res.rank == 10 and len(set(res.kept.tolist())) == 30
    assert svals(M[:, res.kept[:10]])[-1] > 1e-3 * svals(M)[0]   # the first `rank` kept are independent
    assert res.sigma_min_kept < 1e-10 * svals(M)[0]               # no 30 columns can be independent


def test_k_equals_d_and_k_one():
    M = MATRICES["scaled_columns"]
    full = strong_rrqr(M, 48, F)
    assert full.swaps == 0 and full.max_rho == 0.0 and full.converged and sorted(full.kept) == list(range(48))
    assert np.isclose(full.sigma_min_kept, svals(M)[-1], rtol=1e-6)
    one = strong_rrqr(M, 1, F)
    assert one.kept.shape == (1,)
    # k = 1: A = r_11 = the largest column norm, and ρ_1j ≤ f holds for it.
    assert np.isclose(np.linalg.norm(M[:, one.kept[0]]), np.linalg.norm(M, axis=0).max())


def test_reference_reproduced_when_no_swaps():
    for M in (MATRICES["random"], MATRICES["scaled_columns"]):
        for k in (8, 24):
            ours, ref = strong_rrqr(M, k, F), reference_rrqr(M, k, F, dtype=np.float64)
            assert ours.swaps == ref.swaps == 0 and ref.stop_reason == "converged"
            assert (ours.kept == ref.kept).all() and (ours.order == ref.order).all()
            assert np.isclose(ours.max_rho, ref.max_rho, rtol=1e-8)
            assert np.isclose(ours.sigma_min_kept, ref.sigma_min_kept, rtol=1e-8)
    # The faithful float32 reference agrees as well on a well-separated case.
    M = MATRICES["scaled_columns"]
    assert (strong_rrqr(M, 24, F).kept == reference_rrqr(M, 24, F).kept).all()


def test_kahan_needs_swaps_and_ours_fixes_it():
    M = kahan_test_matrix(160, 96, 1.4, seed=3)
    k = 64
    ref = reference_rrqr(M, k, F)                        # float32, as the reference code runs
    assert ref.rho_qrcp > F and ref.swaps >= 1           # plain QRCP is not strong RRQR here
    ours = strong_rrqr(M, k, F)
    assert ours.rho_qrcp > 100 * F and ours.swaps >= 1
    check_strong(M, ours, k)
    # Lemma 3.1: one swap multiplies |det A| = vol(M[:, kept]) by exactly the chosen ρ.
    before, after = strong_rrqr(M, k, F, max_swaps=0), strong_rrqr(M, k, F, max_swaps=1)
    vol = lambda kept: np.exp(np.log(svals(M[:, kept])).sum())  # noqa: E731
    assert np.isclose(vol(after.kept) / vol(before.kept), before.rho_qrcp, rtol=1e-6)


def test_block_kahan_needs_several_swaps():
    M = kahan_test_matrix(160, 64, 1.0, seed=4, blocks=4)
    ours = strong_rrqr(M, 32, F)
    assert ours.rho_qrcp > F and ours.swaps >= 3
    check_strong(M, ours, 32)
    ref = reference_rrqr(M, 32, F, dtype=np.float64)
    assert ref.converged and ref.swaps == ours.swaps and ref.max_rho <= F


def test_max_swaps_cap_is_flagged():
    M = kahan_test_matrix(160, 64, 1.3, seed=1)
    res = strong_rrqr(M, 32, F, max_swaps=0)
    assert res.swaps == 0 and not res.converged and res.stop_reason == "max_swaps" and res.max_rho > F


def test_tiny_scale_no_early_stop():
    """The reference gives up when min|diag A| < 1e-9 in absolute terms; ours is scale invariant."""
    M = kahan_test_matrix(160, 64, 1.3, seed=1)
    base = strong_rrqr(M, 32, F)
    small = strong_rrqr(M * 1e-12, 32, F)
    assert (small.kept == base.kept).all() and small.converged
    ref = reference_rrqr(M * 1e-12, 32, F, dtype=np.float64)
    assert ref.stop_reason == "singular_A" and ref.swaps == 0 and ref.max_rho > F


def test_gram_and_householder_paths_agree(monkeypatch):
    for name in ("random", "scaled_columns", "kahan"):
        M = MATRICES[name]
        a = strong_rrqr(M, 24, F)
        monkeypatch.setattr(rrqr, "GRAM_KAPPA_MAX", 0.0)
        b = strong_rrqr(M, 24, F)
        monkeypatch.undo()
        assert (a.kept == b.kept).all() and a.swaps == b.swaps


def test_batched_equals_per_head():
    heads = np.stack([MATRICES["random"], MATRICES["scaled_columns"], MATRICES["low_rank_plus_noise"],
                      MATRICES["rank_deficient"], kahan_test_matrix(160, 48, 1.3, seed=2)])
    for k in (1, 20, 48):
        batched = strong_rrqr_batched(torch.from_numpy(heads).float(), k, F)
        for M, b in zip(heads, batched):
            s = strong_rrqr(torch.from_numpy(M).float(), k, F)
            assert (s.kept == b.kept).all() and s.swaps == b.swaps and s.rank == b.rank
            assert np.isclose(s.max_rho, b.max_rho, rtol=1e-9)


def test_torch_low_precision_input_and_threads_restored():
    M = torch.from_numpy(MATRICES["random"]).to(torch.bfloat16)
    threads = torch.get_num_threads()
    res = strong_rrqr(M, 16, F)
    assert torch.get_num_threads() == threads  # the single-threaded section restores the setting
    check_strong(M.double().numpy(), res, 16)


@pytest.mark.parametrize("call", [
    lambda: strong_rrqr(MATRICES["random"], 0),
    lambda: strong_rrqr(MATRICES["random"], 49),
    lambda: strong_rrqr(MATRICES["random"], 2.5),
    lambda: strong_rrqr(MATRICES["random"], True),
    lambda: strong_rrqr(MATRICES["random"], 4, f=1.0),
    lambda: strong_rrqr(MATRICES["random"], 4, f=float("nan")),
    lambda: strong_rrqr(MATRICES["random"], 4, max_swaps=-1),
    lambda: strong_rrqr(np.ones(10), 1),
    lambda: strong_rrqr(np.ones((2, 3, 4)), 1),
    lambda: strong_rrqr(np.ones((0, 4)), 1),
    lambda: strong_rrqr(np.array([[1.0, np.nan], [0.0, 1.0]]), 1),
    lambda: strong_rrqr(torch.tensor([[1.0, float("inf")], [0.0, 1.0]]), 1),
    lambda: strong_rrqr(np.ones((3, 3), dtype=complex), 1),
    lambda: strong_rrqr([[1.0, 2.0], [3.0]], 1),
    lambda: strong_rrqr("abc", 1),
    lambda: strong_rrqr_batched(np.ones((5, 4)), 2),
    lambda: reference_rrqr(MATRICES["random"], 0),
])
def test_bad_input_raises_one_sentence(call):
    with pytest.raises(AnalysisError) as e:
        call()
    msg = str(e.value)
    assert msg.endswith(".") and "\n" not in msg and ". " not in msg[:-1]
