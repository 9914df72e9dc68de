"""analysis.linalg.rank.spectral_metrics against an independent numpy oracle (np.linalg.svd per matrix)."""

import warnings

import numpy as np
import pytest
import torch

from analysis.errors import AnalysisError
from analysis.linalg.rank import METRIC_INFO, NonFiniteStateWarning, spectral_metrics

KEYS = ["stable_rank", "rank_utilization", "effective_rank", "participation_ratio", "numerical_rank",
        "energy_rank", "condition_number", "fro_norm", "spectral_norm", "singular_values"]
RANKS = ["stable_rank", "rank_utilization", "effective_rank", "participation_ratio", "numerical_rank",
         "energy_rank", "condition_number"]


def oracle(M: np.ndarray, tau=1e-3, energy=0.95) -> dict:
    """Textbook definitions, one matrix at a time."""
    s = np.linalg.svd(M.astype(np.float64), compute_uv=False)
    m = len(s)
    if s[0] == 0:
        return dict(stable_rank=0, rank_utilization=0, effective_rank=0, participation_ratio=0,
                    numerical_rank=0, energy_rank=0, condition_number=0, fro_norm=0, spectral_norm=0,
                    singular_values=s)
    p = s / s.sum()
    p = p[p > 0]
    r = int((s > tau * s[0]).sum())
    cum = np.cumsum(s**2)
    return dict(
        stable_rank=(s**2).sum() / s[0] ** 2,
        rank_utilization=(s**2).sum() / s[0] ** 2 / m,
        effective_rank=np.exp(-(p * np.log(p)).sum()),
        participation_ratio=(s**2).sum() ** 2 / (s**4).sum(),
        numerical_rank=r,
        energy_rank=int(np.argmax(cum >= energy * cum[-1] * (1 - 1e-12))) + 1,
        condition_number=s[0] / s[r - 1],
        fro_norm=np.linalg.norm(M),
        spectral_norm=s[0],
        singular_values=s,
    )


def check_against_oracle(S: torch.Tensor, rtol=1e-9, atol=1e-9, **kw):
    out = spectral_metrics(S, **kw)
    assert set(out) == set(KEYS)
    batch = S.shape[:-2]
    flat = S.double().reshape(-1, *S.shape[-2:]).numpy()
    for i, M in enumerate(flat):
        ref = oracle(M, **kw)
        idx = np.unravel_index(i, batch) if batch else ()
        for key in KEYS:
            got = out[key][idx].numpy()
            np.testing.assert_allclose(got, ref[key], rtol=rtol, atol=atol, err_msg=key)
    return out


@pytest.mark.parametrize("shape", [(8, 8), (5, 12), (12, 5), (2, 3, 6, 4), (1, 7)])
def test_random_matches_numpy(shape):
    g = torch.Generator().manual_seed(1)
    S = torch.randn(*shape, generator=g, dtype=torch.float64)
    out = check_against_oracle(S)
    assert out["stable_rank"].shape == shape[:-2]
    assert out["singular_values"].shape == (*shape[:-2], min(shape[-2:]))


def test_exact_low_rank():
    g = torch.Generator().manual_seed(2)
    S = torch.randn(4, 10, 3, generator=g, dtype=torch.float64) @ torch.randn(4, 3, 7, generator=g, dtype=torch.float64)
    out = check_against_oracle(S, rtol=1e-8, atol=1e-8)
    assert (out["numerical_rank"] == 3).all()
    assert (out["energy_rank"] <= 3).all()
    assert (out["stable_rank"] <= 3 + 1e-9).all() and (out["effective_rank"] <= 3 + 1e-9).all()


def test_rank_one():
    u, v = torch.tensor([1.0, -2.0, 0.5, 3.0]), torch.tensor([0.3, 1.0, -1.0])
    out = spectral_metrics(torch.outer(u, v).double())
    for key in ["stable_rank", "effective_rank", "participation_ratio", "numerical_rank", "energy_rank",
                "condition_number"]:
        assert out[key].item() == pytest.approx(1.0, abs=1e-9), key
    assert out["rank_utilization"].item() == pytest.approx(1 / 3)
    assert out["fro_norm"].item() == pytest.approx(float(u.norm() * v.norm()))
    assert out["spectral_norm"].item() == pytest.approx(float(u.norm() * v.norm()))


@pytest.mark.parametrize("shape", [(6, 4), (3, 5, 5)])
def test_zero_state_is_all_zero_without_warning(shape):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = spectral_metrics(torch.zeros(shape))
    for key, v in out.items():
        assert torch.isfinite(v).all() and (v == 0).all(), key


def test_zero_matrix_inside_a_batch():
    S = torch.randn(3, 5, 4, dtype=torch.float64)
    S[1] = 0
    out = check_against_oracle(S)
    assert out["effective_rank"][1] == 0 and out["condition_number"][1] == 0


def test_non_finite_matrices_are_nan_and_warned_others_exact():
    g = torch.Generator().manual_seed(3)
    S = torch.randn(2, 3, 6, 5, generator=g, dtype=torch.float64)
    S[0, 1, 2, 3] = float("nan")
    S[1, 2, 0, 0] = float("inf")
    with pytest.warns(NonFiniteStateWarning, match="2 of 6"):
        out = spectral_metrics(S)
    bad = torch.zeros(2, 3, dtype=torch.bool)
    bad[0, 1] = bad[1, 2] = True
    for key, v in out.items():
        assert torch.isnan(v[bad]).all(), key
        assert torch.isfinite(v[~bad]).all(), key
    clean = spectral_metrics(S[~bad])
    for key in KEYS:
        torch.testing.assert_close(out[key][~bad], clean[key], rtol=0, atol=0)


def test_all_nan_batch_does_not_crash():
    with pytest.warns(NonFiniteStateWarning, match="4 of 4"):
        out = spectral_metrics(torch.full((4, 3, 3), float("nan")))
    assert all(torch.isnan(v).all() for v in out.values())


@pytest.mark.parametrize("c", [7.3, 1e-3])
def test_scale_invariance(c):
    S = torch.randn(3, 8, 6, dtype=torch.float64)
    a, b = spectral_metrics(S), spectral_metrics(c * S)
    for key in RANKS:
        torch.testing.assert_close(a[key], b[key], rtol=1e-9, atol=1e-9)
    for key in ["fro_norm", "spectral_norm", "singular_values"]:
        torch.testing.assert_close(c * a[key], b[key], rtol=1e-9, atol=1e-12)


def test_transpose_invariance():
    S = torch.randn(2, 9, 4, dtype=torch.float64)
    a, b = spectral_metrics(S), spectral_metrics(S.mT)
    for key in KEYS:
        torch.testing.assert_close(a[key], b[key], rtol=1e-9, atol=1e-12)


def diag_state(s, rows=None):
    s = torch.tensor(s, dtype=torch.float64)
    M = torch.zeros(rows or len(s), len(s), dtype=torch.float64)
    M[range(len(s)), range(len(s))] = s
    return M


@pytest.mark.parametrize("energy, r", [(0.5, 1), (0.6, 1), (0.7, 2), (0.9, 3), (1.0, 3)])
def test_energy_rank_edges(energy, r):
    # s² = [4, 1, 1, 0]: cumulative fractions 2/3, 5/6, 1, 1
    assert spectral_metrics(diag_state([2.0, 1.0, 1.0, 0.0]), energy=energy)["energy_rank"].item() == r


def test_energy_rank_full_spectrum_at_energy_one():
    S = torch.randn(7, 5, dtype=torch.float64)
    assert spectral_metrics(S, energy=1.0)["energy_rank"].item() == 5


@pytest.mark.parametrize("tau, r, kappa", [(1e-3, 2, 2.0), (1e-1, 2, 2.0), (0.6, 1, 1.0), (1e-6, 3, 4e5), (0.0, 3, 4e5)])
def test_numerical_rank_and_condition_number(tau, r, kappa):
    out = spectral_metrics(diag_state([4.0, 2.0, 1e-5], rows=5), tau=tau)
    assert out["numerical_rank"].item() == r
    assert out["condition_number"].item() == pytest.approx(kappa, rel=1e-9)


def test_numerical_rank_ignores_exact_zeros_with_tau_zero():
    out = spectral_metrics(diag_state([3.0, 1.0, 0.0]), tau=0.0)
    assert out["numerical_rank"].item() == 2 and out["condition_number"].item() == pytest.approx(3.0)


@pytest.mark.parametrize("dtype, out_dtype", [(torch.float32, torch.float32), (torch.float64, torch.float64),
                                              (torch.bfloat16, torch.float32), (torch.int64, torch.float32)])
def test_output_dtypes(dtype, out_dtype):
    S = (torch.randn(2, 4, 3) * 5).to(dtype)
    out = spectral_metrics(S)
    assert all(v.dtype == out_dtype for v in out.values())
    check_against_oracle(S.double(), rtol=1e-9)  # the oracle agrees on the float64 cast
    torch.testing.assert_close(out["stable_rank"].double(), spectral_metrics(S.double())["stable_rank"],
                               rtol=1e-6, atol=1e-6)


def test_float32_input_matches_numpy():
    S = torch.randn(3, 16, 16)
    check_against_oracle(S, rtol=1e-5, atol=1e-5)


def test_metric_info_covers_every_metric():
    assert set(METRIC_INFO) == set(KEYS) - {"singular_values"}
    for name, info in METRIC_INFO.items():
        label, formula, description = info
        assert label and formula and description, name


@pytest.mark.parametrize("bad, kw", [(np.zeros((3, 3)), {}), (torch.zeros(5), {}), (torch.zeros(3, 0), {}),
                                     (torch.zeros(3, 3, dtype=torch.complex64), {}),
                                     (torch.zeros(3, 3), {"tau": -1.0}), (torch.zeros(3, 3), {"energy": 0.0}),
                                     (torch.zeros(3, 3), {"energy": 1.5})])
def test_bad_input_raises_analysis_error(bad, kw):
    with pytest.raises(AnalysisError):
        spectral_metrics(bad, **kw)


@pytest.mark.parametrize("shape", [(3, 128, 128), (4, 20, 48), (4, 48, 20)])
def test_gram_route_matches_numpy(shape):
    """The float64 Gram route (used for float32 states) against numpy's SVD: singular values to ~1e-7·s1,
    every rank metric to a relative 1e-6 (the state's own float32 rounding is 6e-8)."""
    g = torch.Generator().manual_seed(5)
    low = torch.randn(*shape[:-1], 6, generator=g, dtype=torch.float64) @ torch.randn(6, shape[-1], generator=g,
                                                                                        dtype=torch.float64)
    S = low + 1e-2 * torch.randn(*shape, generator=g, dtype=torch.float64)  # spectrum spanning 3 decades
    out = spectral_metrics(S, method="gram")
    for i, M in enumerate(S.numpy()):
        ref = oracle(M)
        s1 = ref["spectral_norm"]
        np.testing.assert_allclose(out["singular_values"][i].numpy(), ref["singular_values"], rtol=0, atol=1e-7 * s1)
        for key in RANKS + ["fro_norm", "spectral_norm"]:
            np.testing.assert_allclose(out[key][i].numpy(), ref[key], rtol=1e-6, err_msg=key)


def test_auto_route_by_dtype(monkeypatch):
    """float64 input keeps the exact SVD; float32 states take the Gram route; both refuse an unknown method."""
    import analysis.linalg.rank as rank
    used = []
    real = rank.singular_values
    monkeypatch.setattr(rank, "singular_values", lambda X, method, finite=None: used.append(method) or real(X, method,
                                                                                                       finite))
    spectral_metrics(torch.randn(2, 5, 4, dtype=torch.float64))
    spectral_metrics(torch.randn(2, 5, 4))
    assert used == ["svd", "gram"]
    with pytest.raises(AnalysisError, match="method"):
        spectral_metrics(torch.randn(2, 5, 4), method="qr")


def test_split_gram_route_matches_one_call_and_numpy():
    """A batch big enough to be split across worker threads (one LAPACK thread each) gives the same values as
    the unsplit call per matrix (to rounding) and as numpy's SVD, keeps NaN to its own matrices, and leaves the
    process's thread count as it was."""
    import analysis.linalg.rank as rank
    g = torch.Generator().manual_seed(11)
    S = torch.randn(3, 2, 40, 16, 12, generator=g) * torch.logspace(0, -5, 12)  # 240 matrices, ill-conditioned
    S[1, 0, 7, 3, 4] = float("nan")
    threads = torch.get_num_threads()
    assert S.shape[:-2].numel() >= rank.PARALLEL_MIN
    with pytest.warns(NonFiniteStateWarning, match="1 of 240"):
        split = spectral_metrics(S)
    assert torch.get_num_threads() == threads
    one = {}
    for i in range(3):  # small calls take the unsplit route
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonFiniteStateWarning)
            part = spectral_metrics(S[i])
        for k, v in part.items():
            one.setdefault(k, []).append(v)
    nan = torch.zeros(3, 2, 40, dtype=torch.bool)
    nan[1, 0, 7] = True
    for k, parts in one.items():
        whole = torch.stack(parts)
        bad = nan[..., None] if k == "singular_values" else nan
        assert torch.isnan(split[k][bad.expand_as(split[k])]).all()
        assert torch.allclose(split[k].nan_to_num(-1.0), whole.nan_to_num(-1.0), rtol=1e-6, atol=1e-6), k
    ref = np.linalg.svd(S[0, 1].double().numpy(), compute_uv=False)
    assert np.allclose(split["singular_values"][0, 1].double().numpy(), ref, rtol=1e-5, atol=1e-7 * ref[:, :1])


def test_gram_route_rank_deficient_state_is_clean():
    """Rounding makes some Gram eigenvalues of a rank-2 state slightly negative: clamped, never NaN."""
    g = torch.Generator().manual_seed(6)
    S = (torch.randn(4, 64, 2, generator=g) @ torch.randn(4, 2, 64, generator=g))
    out = spectral_metrics(S)
    assert all(torch.isfinite(v).all() for v in out.values())
    assert (out["numerical_rank"] == 2).all() and (out["energy_rank"] <= 2).all()
