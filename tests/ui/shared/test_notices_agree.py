"""Issue 29 items 5 and 6: every notice is computed from the numbers under it and says what they show — the
latency notice says "steps" only where the times step, the sensitivity notice charges what the allocator charges,
a recovery verdict has its noise, the validation axis does not turn 0.05 % into a plunge, and only the effective
rank is called the count of directions a state uses."""
import json
import math

import numpy as np
import pytest

from analysis.shrink.sensitivity import RESULTS_DIR, grid
from ui.shared import notice


def timed(dims, ms):
    return [{"key_dim": d, "median_ms": t, "tiles": -(-d // 64)} for d, t in zip(dims, ms)]


def test_the_latency_notice_says_steps_only_where_the_times_step():
    # the CPU times: one tile throughout, rising with dk
    proportional = notice.latency(timed([16, 32, 48, 64], [7.9, 13.8, 18.0, 28.3]))
    assert "steps" not in proportional and "roughly in proportion to dk" in proportional
    assert "3.58× the time for 4× dk" in proportional
    stepped = notice.latency(timed([32, 64, 96, 128], [10.0, 10.4, 20.1, 20.6]))
    assert "jump at the dotted boundaries" in stepped and "in proportion" not in stepped
    neither = notice.latency(timed([16, 64], [10.0, 11.0]))
    assert "neither" in neither and "steps" not in neither


def test_the_sensitivity_notice_charges_what_the_allocator_charges():
    """granite-h-small's shipped map: its negative one-layer losses are clamped to 0 by the allocator, so they
    cannot make a "real choice"; docs/results.md says the allocator has nothing to choose there."""
    from analysis.shrink.allocate import options
    smap = json.loads((RESULTS_DIR / "sensitivity-granite-h-small-l1.json").read_text())
    ratios, g = smap["settings"]["ratios"], grid(smap)
    line = notice.sensitivity(ratios, g.losses, g.ses)
    assert "real choice" not in line and "cannot be told apart" in line
    assert "layer 4 -0.0017" in line and "charged as 0" in line
    # the figure it names is the allocator's own charge for that layer at that ratio
    worst = int(line.split("layer ")[1].split(" is the most sensitive")[0])
    charged_by_allocator = {o.ratio: o.loss for o in options(smap)[worst]}   # issue 40: the fitted map, both
    assert f"charges {charged_by_allocator[ratios[-1]]:+.4f}" in line
    results = (RESULTS_DIR.parents[1] / "docs" / "results.md").read_text()
    assert "the allocator has nothing to choose between layers on this sample" in results


def measured(ppl: float, tokens: int = 2048) -> dict:
    return {"perplexity": {"perplexity": ppl, "dataset": "Shakespeare test split", "context": 256, "stride": 256,
                           "tokens": tokens}}


def test_a_recovery_verdict_inside_its_noise_says_so():
    from ui.shared.shrink_report import recovery_verdict
    change = {"delta_log_ppl": -0.0004, "se": 0.0012, "windows": 13, "tokens": 3328}
    tiny = recovery_verdict(measured(123.96), measured(123.95), change)
    assert tiny["verdict"] == "within noise" and "within noise" in tiny["text"] and "13 validation windows" in tiny["text"]
    big = recovery_verdict(measured(123.96), measured(110.0), change)
    assert big["verdict"] == "better" and "2 SE = " in big["text"]
    assert "no noise estimate" in recovery_verdict(measured(123.96), measured(123.95))["text"]


def test_the_recovery_curve_does_not_zoom_into_noise():
    from ui.prune.recovery_view import loss_figure
    train = [{"step": i, "loss": 4.8 - 0.001 * i, "ce": 4.8, "kd": None} for i in range(1, 5)]
    checks = [{"step": 0, "perplexity": 123.96}, {"step": 4, "perplexity": 123.90}]
    fig = loss_figure(train, checks)
    axis = fig.layout.yaxis2
    low, high = axis.range
    assert high - low >= 0.02 * 123.9  # ±1 %: a 0.05 % change stays a small step on the chart
    assert axis.tickformat and "4" in axis.tickformat  # four significant digits, not six


def test_only_the_effective_rank_is_called_the_count_of_directions_used():
    m = 64
    u = np.array([[0.09, 0.06], [0.05, 0.06]])
    erank = np.array([[22.9, 20.1], [18.0, 19.5]])
    line = notice.rank_map("rank_utilization", "Rank utilization", u, m, headline=erank)
    assert "directions carry" not in line and "not a count of directions" in line
    assert f"effective rank of the same states, the count of directions used, averages {erank.mean():.3g}" in line
    spectrum = notice.spectrum({"after token 7": [4.0, 1.0, 0.5, 0.1]}, headline=3.2)
    assert "really uses" not in spectrum and "3 of 4 singular values exceed s₁/10" in spectrum
    assert "effective rank, the count of directions used, is 3.2" in spectrum


def test_the_rank_card_matches_numpy_definitions():
    from analysis.linalg.rank_card import rank_card
    rng = np.random.default_rng(0)
    S = rng.standard_normal((3, 16, 8)) * np.geomspace(1, 1e-4, 16)[None, :, None]  # three states, decaying rows
    s = np.linalg.svd(S, compute_uv=False)                                            # [3, 8], descending
    rows = {r["measure"]: r["value"] for r in rank_card(s, tau=1e-3)}
    p = s / s.sum(-1, keepdims=True)
    energy = s ** 2
    expect = {
        "effective rank (headline)": np.exp(-(p * np.log(p)).sum(-1)).mean(),
        "numerical rank at τ = 0.001": (s > 1e-3 * s[:, :1]).sum(-1).mean(),
        "energy rank at 99%": np.mean([np.argmax(np.cumsum(e) / e.sum() >= 0.99) + 1 for e in energy]),
        "participation ratio": (energy.sum(-1) ** 2 / (energy ** 2).sum(-1)).mean(),
        "stable rank = u · min(dk, dv)": (energy.sum(-1) / energy[:, 0]).mean(),
        "count of s > s₁/10": (s > 0.1 * s[:, :1]).sum(-1).mean(),
    }
    assert set(rows) == set(expect)
    for name, value in expect.items():  # float64 SVD both sides: agreement to 1e-9 relative
        assert rows[name] == pytest.approx(float(value), rel=1e-9), name
    zero = {r["measure"]: r["value"] for r in rank_card(np.zeros((1, 4)), tau=1e-3)}
    assert all(v == 0 and not math.isnan(v) for v in zero.values())


def test_state_lab_series_are_drawn_only_where_valid_and_its_labels_cannot_collide():
    """Item 7: the first- and second-order curves of the noise probe leave gaps outside their validity (as on the
    Query noise page), and the spectrum names τ·s₁ and the numerical rank in its legend, not as text on the plot
    (the two labels were drawn over each other)."""
    from ui.state_lab import state_lab_figures as figs
    x = [-10.0, 0.0, 10.0, 20.0]
    probe = {"snr_db": x, **{k: [1.0, 0.5, 0.1, 0.01] for k in ("mc_raw", "bound_raw", "mc_renorm", "first_order",
                                                                  "second_order")},
             "first_valid": [False, False, True, True], "second_valid": [False, True, True, True]}
    fig = figs.noise_curves(probe, 10.0, "t", "valid from 5 dB", "valid from -5 dB")
    y = {t.name.split(",")[0]: list(t.y) for t in fig.data}
    assert y["first order"] == [None, None, 0.1, 0.01] and y["second order"] == [None, 0.5, 0.1, 0.01]
    assert y["Monte Carlo"] == [1.0, 0.5, 0.1, 0.01]  # measurements are drawn everywhere
    spectrum = figs.spectrum([1.0, 0.3, 0.01, 1e-5], 3, 1e-3, "t")
    assert not spectrum.layout.annotations
    assert [t.name for t in spectrum.data] == ["s_i", "τ·s₁ (τ = 0.001)", "numerical rank 3"]
