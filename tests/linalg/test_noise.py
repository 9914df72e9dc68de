"""analysis.linalg.noise: closed forms against numpy, Monte Carlo against the closed forms."""

import numpy as np
import pytest
import torch

import analysis.linalg.noise as noise
from analysis.errors import AnalysisError
from analysis.linalg.noise import (analytic_noise, analytic_retrieval_error, monte_carlo_retrieval_error,
                            normalized_first_order, singular_direction_keys)


def state(*shape, seed=0, spread=True):
    """A state with a spread-out spectrum (so per-direction errors differ a lot)."""
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(*shape, generator=g, dtype=torch.float64)
    if spread:
        U, s, Vh = torch.linalg.svd(S, full_matrices=False)
        S = U @ torch.diag_embed(torch.logspace(0, -1.5, s.shape[-1], dtype=torch.float64)) @ Vh
    return S


def test_analytic_noise_matches_numpy():
    S = state(2, 12, 8)
    out = analytic_noise(S, sigma=0.3)
    for b in range(2):
        s = np.linalg.svd(S[b].numpy(), compute_uv=False)
        r = int((s > 1e-3 * s[0]).sum())
        assert out["noise_energy"][b].item() == pytest.approx(0.09 * (s**2).sum(), rel=1e-10)
        assert out["worst_case_gain"][b].item() == pytest.approx(s[0], rel=1e-10)
        assert out["kappa"][b].item() == pytest.approx(s[0] / s[r - 1], rel=1e-10)
        np.testing.assert_allclose(out["direction_gain"][b].numpy(), (s**2).sum() / s**2, rtol=1e-10)
        np.testing.assert_allclose(out["singular_values"][b].numpy(), s, rtol=1e-10)


def test_analytic_noise_zero_state_and_zero_directions():
    z = analytic_noise(torch.zeros(4, 3))
    assert z["noise_energy"].item() == 0 and z["kappa"].item() == 0
    assert torch.isinf(z["direction_gain"]).all()
    S = torch.diag(torch.tensor([2.0, 1.0, 0.0]))
    g = analytic_noise(S)["direction_gain"]
    assert g[:2].tolist() == pytest.approx([5 / 4, 5.0]) and torch.isinf(g[2])


def test_monte_carlo_noise_energy_within_four_standard_errors():
    """E‖Sᵀε‖²/‖Sᵀk‖² = σ²‖S‖_F²/‖Sᵀk‖²; Var‖Sᵀε‖² = 2σ⁴Σs⁴ gives the standard error."""
    S = state(16, 12, seed=1)
    keys = torch.randn(5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    n = 4000
    mc = monte_carlo_retrieval_error(S, keys, [0.0, 20.0], n_samples=n, generator=torch.Generator().manual_seed(3))
    s = np.linalg.svd(S.numpy(), compute_uv=False)
    sig = np.linalg.norm(keys.numpy() @ S.numpy(), axis=-1)[:, None]
    sigma2 = mc["sigma"].numpy() ** 2
    expect = sigma2 * (s**2).sum() / sig**2
    se = sigma2 * np.sqrt(2 * (s**4).sum()) / sig**2 / np.sqrt(n)
    assert np.all(np.abs(mc["mean_sq"].numpy() - expect) < 4 * se)
    ana = analytic_retrieval_error(S, keys, [0.0, 20.0])
    np.testing.assert_allclose(ana["rms_error"].numpy() ** 2, expect, rtol=1e-10)
    np.testing.assert_allclose(ana["sigma"].numpy(), mc["sigma"].numpy(), rtol=1e-12)


def test_singular_direction_error_matches_sigma2_sum_over_sj2():
    S = state(10, 8, seed=4)
    j = [0, 3, 7]
    keys = singular_direction_keys(S, j)
    assert keys.shape == (3, 10)
    s = np.linalg.svd(S.numpy(), compute_uv=False)
    np.testing.assert_allclose(np.linalg.norm(keys.numpy() @ S.numpy(), axis=-1), s[j], rtol=1e-10)
    np.testing.assert_allclose(keys.numpy() @ keys.numpy().T, np.eye(3), atol=1e-12)

    n, snr = 4000, [10.0]
    mc = monte_carlo_retrieval_error(S, keys, snr, n_samples=n, generator=torch.Generator().manual_seed(5))
    sigma2 = 1.0 / (10 * 10 ** (snr[0] / 10))  # unit keys, dk = 10
    expect = sigma2 * (s**2).sum() / s[j] ** 2
    se = sigma2 * np.sqrt(2 * (s**4).sum()) / s[j] ** 2 / np.sqrt(n)
    assert np.all(np.abs(mc["mean_sq"][:, 0].numpy() - expect) < 4 * se)
    gain = analytic_noise(S)["direction_gain"][j].numpy()
    np.testing.assert_allclose(sigma2 * gain, expect, rtol=1e-10)
    # the weakest direction is the worst-retrieved one: low rank amplifies query noise
    assert mc["mean"][0, 0] < mc["mean"][1, 0] < mc["mean"][2, 0]


def test_normalized_first_order_matches_numpy():
    S = state(2, 9, 6, seed=6)
    k = torch.randn(2, 9, dtype=torch.float64) * 3
    got = normalized_first_order(S, k, sigma=0.2)
    for b in range(2):
        kh = k[b].numpy() / np.linalg.norm(k[b].numpy())
        ref = 0.04 * (np.linalg.norm(S[b].numpy()) ** 2 - np.linalg.norm(S[b].numpy().T @ kh) ** 2)
        assert got[b].item() == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize("snr", [30.0, 40.0])
def test_renormalized_first_order_agrees_with_monte_carlo_at_high_snr(snr):
    S = state(16, 16, seed=7)
    keys = torch.cat([singular_direction_keys(S, [0, 5, 15]),
                      torch.randn(3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(8))])
    mc = monte_carlo_retrieval_error(S, keys, [snr], n_samples=4000, renormalize=True,
                                     generator=torch.Generator().manual_seed(9))
    ana = analytic_retrieval_error(S, keys, [snr])
    np.testing.assert_allclose(mc["mean_sq"].numpy(), ana["rms_error_renorm"].numpy() ** 2, rtol=0.05)
    assert torch.all(mc["sigma"] == ana["sigma_renorm"])


def test_determinism_under_a_seed():
    S, keys = state(3, 8, 5, seed=10), torch.randn(3, 4, 8, dtype=torch.float64)
    run = lambda seed, r: monte_carlo_retrieval_error(S, keys, [0, 10, 20], n_samples=64, renormalize=r,
                                                      generator=torch.Generator().manual_seed(seed))
    for r in (False, True):
        a, b, c = run(11, r), run(11, r), run(12, r)
        for key in a:
            assert torch.equal(a[key], b[key]), key
        assert not torch.equal(a["mean"], c["mean"])


def test_shapes_broadcasting_and_chunking(monkeypatch):
    S = state(2, 3, 8, 6, seed=13)
    keys = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    monkeypatch.setattr(noise, "_CHUNK_BYTES", 1)  # one (state, key) pair per chunk
    mc = monte_carlo_retrieval_error(S.float(), keys.float(), [5.0, 15.0], n_samples=2000,
                                     generator=torch.Generator().manual_seed(14))
    assert all(v.shape == (2, 3, 4, 2) and v.dtype == torch.float32 for k, v in mc.items() if k != "snr_db")
    ana = analytic_retrieval_error(S, keys, [5.0, 15.0])
    np.testing.assert_allclose(mc["mean_sq"].double().numpy(), ana["rms_error"].numpy() ** 2, rtol=0.15)
    # one state shared by every key set, and per-matrix agreement of the analytic forms
    one = analytic_retrieval_error(S[1, 2], keys[1, 2], [5.0, 15.0])
    for key in ("rms_error", "rms_error_renorm"):
        torch.testing.assert_close(one[key], ana[key][1, 2])
    assert monte_carlo_retrieval_error(S[0, 0], keys, [1.0], n_samples=2)["mean"].shape == (2, 3, 4, 1)


def test_a_call_checked_before_each_chunk_stops_there_and_is_otherwise_unchanged(monkeypatch):
    """The dashboard's Monte-Carlo job passes a cancel check: called once per chunk; a check that never raises changes
    no number (the same draws, in the same order)."""
    S, keys = state(3, 8, 5, seed=10), torch.randn(3, 4, 8, dtype=torch.float64)
    monkeypatch.setattr(noise, "_CHUNK_BYTES", 1)  # one (state, key) pair per chunk: 12 chunks
    run = lambda check=None: monte_carlo_retrieval_error(S, keys, [0, 10], n_samples=16, renormalize=True,  # noqa: E731
                                                         generator=torch.Generator().manual_seed(3), before_chunk=check)
    checks = []
    checked = run(lambda: checks.append(1))
    assert len(checks) == 12 and all(torch.equal(checked[k], v) for k, v in run().items())

    class Stop(Exception):
        pass

    def stop_at_the_third():
        checks.append(1)
        if len(checks) == 12 + 3:
            raise Stop
    with pytest.raises(Stop):
        run(stop_at_the_third)


def test_keys_that_the_state_cannot_read_are_inf():
    S = torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64))
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    mc = monte_carlo_retrieval_error(S, keys, [10.0], n_samples=8, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(mc["mean"][0]).all() and torch.isinf(mc["mean"][1]).all()
    assert torch.isinf(analytic_retrieval_error(S, keys, [10.0])["rms_error"][1]).all()


S0, K0 = torch.zeros(4, 3), torch.ones(2, 4)


@pytest.mark.parametrize("call", [
    lambda: monte_carlo_retrieval_error(S0, torch.ones(2, 3), [0.0]),           # dk mismatch
    lambda: monte_carlo_retrieval_error(S0, K0, [0.0], n_samples=0),
    lambda: monte_carlo_retrieval_error(S0, torch.ones(4), [0.0]),              # keys need [..., n, dk]
    lambda: monte_carlo_retrieval_error(S0, torch.zeros(2, 4), [0.0]),          # zero key
    lambda: monte_carlo_retrieval_error(S0, K0, [float("nan")]),
    lambda: monte_carlo_retrieval_error(torch.zeros(2, 4, 3), torch.ones(3, 2, 4), [0.0]),  # batch mismatch
    lambda: analytic_noise(S0, sigma=-1.0),
    lambda: analytic_noise(torch.zeros(3)),
    lambda: normalized_first_order(S0, torch.ones(3), 0.1),
    lambda: normalized_first_order(S0, torch.ones(4), -0.1),
    lambda: analytic_retrieval_error(S0, torch.ones(2, 5), [0.0]),
    lambda: singular_direction_keys(S0, [3]),
    lambda: singular_direction_keys(torch.full((4, 3), float("nan")), [0]),
])
def test_bad_input_raises_analysis_error(call):
    with pytest.raises(AnalysisError):
        call()


# --- the re-normalised query beyond first order (issue 11 (a)) --------------------------------------------

def low_rank(d, rank, seed, tail=0.0):
    """A d×d state with `rank` singular values spread over a decade and the rest at `tail` (float64)."""
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    s = torch.full((d,), tail, dtype=torch.float64)
    s[:rank] = torch.logspace(0, -1, rank, dtype=torch.float64)
    return U @ torch.diag(s) @ V.T


def test_second_order_rescues_a_numerically_rank_one_head():
    """k = u1 of a numerically rank-1 state: the first order is ~10⁶× too small, the second within 2 %."""
    S = low_rank(32, 1, seed=20, tail=1e-6)
    k = singular_direction_keys(S, [0])
    mc = monte_carlo_retrieval_error(S, k, [20.0], n_samples=20000, renormalize=True,
                                     generator=torch.Generator().manual_seed(21))
    ana = analytic_retrieval_error(S, k, [20.0])
    rms = mc["rms"].item()
    assert ana["rms_error_renorm"].item() < 1e-3 * rms
    assert ana["rms_error_renorm2"].item() == pytest.approx(rms, rel=0.02)
    assert not ana["renorm_valid"].item() and ana["renorm2_valid"].item()
    # the second-order term alone, by hand: ¼(d²−1)σ⁴‖Sᵀk‖² with σ² = 1/(d·100)
    sigma2 = 1 / (32 * 100)
    expect = (0.25 * (32**2 - 1) * sigma2**2 * 1.0 + sigma2 * (31 * 1e-12)) ** 0.5
    assert ana["rms_error_renorm2"].item() == pytest.approx(expect, rel=1e-2)
    assert not analytic_retrieval_error(S, k, [0.0])["renorm2_valid"].item()


@pytest.mark.parametrize("rank, tail", [(1, 1e-7), (3, 0.0), (24, None)])
def test_predictions_labelled_valid_are_within_tolerance_of_monte_carlo(rank, tail):
    """Like with like (Monte-Carlo RMS vs predicted RMS): wherever a truncation is labelled valid it is within
    VALIDITY_TOL (+ 4 standard errors) of an independent Monte Carlo; outside, nothing is promised."""
    d = 24
    S = low_rank(d, rank, seed=30 + rank, tail=tail) if tail is not None else state(d, d, seed=31)
    dirs = list(range(min(rank, 3)))
    keys = torch.cat([singular_direction_keys(S, dirs),
                      torch.randn(2, d, dtype=torch.float64, generator=torch.Generator().manual_seed(32))])
    snr = [-10.0, -5.0, 0.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0]
    mc = monte_carlo_retrieval_error(S, keys, snr, n_samples=6000, renormalize=True,
                                     generator=torch.Generator().manual_seed(33))
    ana = analytic_retrieval_error(S, keys, snr)
    rms, se = mc["rms"], mc["rms_se"]
    for order, key in ((1, "renorm"), (2, "renorm2")):
        pred, valid = ana[f"rms_error_{key}"], ana[f"{key}_valid"]
        off = (pred - rms).abs()
        assert torch.all(off[valid] <= noise.VALIDITY_TOL * rms[valid] + 4 * se[valid]), (order, off / rms)
        assert not valid[:, 0].any()  # −10 dB: t = dσ² = 10, no truncation holds
        # the labelled range is one interval [valid_from, ∞) and matches the per-point labels
        start = ana[f"{key}_valid_from_snr_db"]
        assert torch.equal(valid, torch.tensor(snr, dtype=torch.float64) >= start[:, None])
    assert ana["renorm2_valid"][:, -3:].all()  # ≥ 20 dB: every key of every state
    # the second order is never worse than the first where both are labelled valid, and usually much better
    both = ana["renorm_valid"] & ana["renorm2_valid"]
    err1 = (ana["rms_error_renorm"] / rms - 1).abs()[both]
    err2 = (ana["rms_error_renorm2"] / rms - 1).abs()[both]
    assert err2.mean() <= err1.mean() + 1e-3


def test_cancelling_second_order_parts_do_not_fake_validity():
    """A key whose σ⁴ term nearly cancels (¼(d²−1)g ≈ (d−2)p) must still be invalid at t = dσ² = 10."""
    d = 16
    p, g = 1.0, 4 * (d - 2) / (d * d - 1)  # exact cancellation of the two σ⁴ parts
    S = torch.zeros(d, 2, dtype=torch.float64)
    S[0, 0], S[1, 1] = g**0.5, p**0.5
    k = torch.zeros(1, d, dtype=torch.float64)
    k[0, 0] = 1.0
    ana = analytic_retrieval_error(S, k, [-10.0, 40.0])
    assert ana["rms_error_renorm2"][0, 0].item() == pytest.approx(ana["rms_error_renorm"][0, 0].item(), rel=1e-12)
    assert ana["renorm_valid"].tolist() == [[False, True]]


def test_renormalized_series_matches_the_retrieval_error_form():
    S, k = state(3, 10, 7, seed=40), torch.randn(3, 10, dtype=torch.float64)
    series = noise.renormalized_series(S, k, 0.05)
    ana = analytic_retrieval_error(S, k[:, None], [10 * np.log10(1 / (10 * 0.05**2))])  # same σ for unit keys
    g = (k / k.norm(dim=-1, keepdim=True))[:, None] @ S
    g2 = g.square().sum((-2, -1))
    torch.testing.assert_close(series["second_order"] / g2, ana["rms_error_renorm2"][:, 0, 0] ** 2)
    torch.testing.assert_close(series["first_order"], normalized_first_order(S, k, 0.05))
    torch.testing.assert_close(series["second_order_error"], ana["renorm2_error_est"][:, 0, 0])
    with pytest.raises(AnalysisError):
        noise.renormalized_series(S, k, -1.0)


def test_monte_carlo_rms_and_its_standard_error():
    """rms = sqrt(mean_sq) (not the mean); rms_se matches the spread of rms over independent seeds."""
    S, keys = state(12, 8, seed=50), torch.randn(2, 12, dtype=torch.float64)
    runs = [monte_carlo_retrieval_error(S, keys, [10.0], n_samples=400, renormalize=True,
                                        generator=torch.Generator().manual_seed(100 + i)) for i in range(30)]
    torch.testing.assert_close(runs[0]["rms"], runs[0]["mean_sq"].sqrt())
    assert torch.all(runs[0]["mean"] < runs[0]["rms"])  # Jensen: the mean of |x| is below its RMS
    spread = torch.stack([r["rms"] for r in runs]).std(0)
    se = torch.stack([r["rms_se"] for r in runs]).mean(0)
    assert torch.all((se / spread - 1).abs() < 0.4), (se, spread)


def test_numerical_rank_is_reported():
    S = torch.diag(torch.tensor([1.0, 1e-2, 1e-5], dtype=torch.float64))
    assert analytic_noise(S)["numerical_rank"].item() == 2


# --- summaries over sequences (CLI and dashboard) ---------------------------------------------------------

def test_directions_beyond_the_numerical_rank_are_left_out_with_the_reason():
    from analysis.inspect.noise_report import directions_within_rank, state_table
    S = torch.stack([low_rank(8, 3, seed=60), low_rank(8, 1, seed=61, tail=1e-9)])
    table = state_table(S)
    assert [r["numerical rank"] for r in table] == [3, 1]
    assert table[1]["Σs²/s₂²"] is None and table[1]["Σs²/s₃²"] is None  # never a 1e10 "result"
    assert table[0]["Σs²/s₃²"] == pytest.approx(analytic_noise(S[0])["direction_gain"][2].item())
    kept, why = directions_within_rank(torch.tensor([3.0, 1.0]), [0, 1, 2])
    assert kept == [0] and "sequence 1" in why and "rank 1" in why
    assert directions_within_rank(torch.tensor([3.0, 4.0]), [0, 1, 2]) == ([0, 1, 2], "")


def test_summaries_take_the_median_over_sequences_and_validity_for_all():
    from analysis.inspect.noise_report import monte_carlo, predictions, summarize_probe
    S = torch.stack([low_rank(16, 1, seed=70, tail=1e-7), low_rank(16, 4, seed=71), low_rank(16, 4, seed=72)])
    keys = noise.singular_direction_keys(S, [0])
    snr = [0.0, 10.0, 20.0, 40.0]
    pred = predictions(S, keys, snr)
    mc = monte_carlo(S, keys, snr, 2000, True, seed=0)
    out = summarize_probe("direction 1", snr, pred, mc_renorm=mc)
    torch.testing.assert_close(torch.tensor(out["mc_rms"]["median"], dtype=torch.float64), mc["rms"].median(0).values)
    start = max(pred["second_valid_from"].tolist())
    assert out["second_order_valid_from_snr_db"] == pytest.approx(start)
    assert out["second_order_valid"] == [s >= start for s in snr] == [False, True, True, True]
    assert out["first_order_valid"][:3] == [False, False, False]  # the rank-1 sequence breaks the first order
    err = out["second_order_error_vs_mc"]
    assert all(abs(e) < 0.1 for e, ok in zip(err, out["second_order_valid"]) if ok)
    # deterministic per probe: the same seed gives the same numbers whatever ran before
    assert torch.equal(monte_carlo(S, keys, snr, 50, True, seed=3)["rms"], monte_carlo(S, keys, snr, 50, True, 3)["rms"])


def test_noise_cli_carries_median_spread_and_validity(tiny_dirs, capsys):
    from analysis.cli.main import main
    model = str(tiny_dirs["delta_net"])
    args = ["noise", model, "--tokens", "24", "--batch", "3", "--samples", "16", "--device", "cpu"]
    assert main([*args, "--snr=-10,40", "--json", "-"]) == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert "median" in report["aggregate"] and "valid" in report["validity"]
    head = report["layers"][0]["heads"][0]
    assert len(head["numerical_rank"]) == 3
    assert set(head["kappa"]) == {"median", "q25", "q75"}
    for probe in [*head["mc_singular"], head["mc_real_keys"]]:
        assert probe["second_order_valid"] == [False, True] and probe["first_order_valid"][0] is False
        assert len(probe["mc_rms"]["median"]) == 2 and len(probe["second_order_error_vs_mc"]) == 2
        assert probe["mc_rms"]["q25"][1] <= probe["mc_rms"]["median"][1] <= probe["mc_rms"]["q75"][1]
    assert all(d["direction"] <= min(head["numerical_rank"]) for d in head["mc_singular"])
    assert main([*args, "--snr", "40,-10"]) == 0
    human = capsys.readouterr().out
    assert "median [q25–q75]" in human and "(outside validity)" in human and "validity:" in human
