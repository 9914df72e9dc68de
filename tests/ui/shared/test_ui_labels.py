"""Labels and chart details a lecturer found wrong (issue 23, item 5), on the pure ui/ builders."""
import math

import numpy as np
import pytest
import torch

from analysis.inspect import noise_report
from ui.query_noise import noise_tables


def test_closed_form_table_follows_the_direction_picker():
    torch.manual_seed(0)
    S = torch.randn(3, 16, 8, dtype=torch.float64)  # full rank 8 in every sequence
    rows = noise_report.state_table(S, n_directions=8)
    table = noise_tables.closed_form_table(rows, [1, 4])
    gains = [c for c in table.columns if c.startswith("Σs²/s")]
    assert gains == ["Σs²/s₁²", "Σs²/s₄²"]
    s = torch.linalg.svdvals(S[0])  # independent reference: the SVD of sequence 0
    expected = float((s ** 2).sum() / s[3] ** 2)
    assert float(table.loc["sequence 0", "Σs²/s₄²"]) == pytest.approx(expected, rel=1e-3)  # 4 printed digits
    assert len(noise_tables.closed_form_table(rows).columns) == 4 + 8  # rank, ‖S‖², s₁, κ; None keeps every direction


def test_std_bands_are_clipped_at_the_metric_floor():
    from ui.shared import figures, scales
    mean, std = [1.5, 3.0, 900.0], [200.0, 1.0, 300.0]  # κ: mean − std would reach −198.5
    fig = figures.metric_over_positions([0, 8, 16], mean, std, "κ", "t", bounds=scales.band_bounds("condition_number"))
    band = fig.data[0].y
    assert min(band) == 1.0 and max(band) == 1000.0  # κ_τ ∈ [1, 1/τ]
    assert list(fig.data[1].y) == mean  # the mean line itself is not clipped
    assert scales.band_bounds("rank_utilization") == (0.0, 1.0) and scales.band_bounds("stable_rank") == (0.0, None)


def test_log_axes_label_decades_only():
    from ui.shared import figures
    fig = figures.singular_spectrum({"after token 7": [3.0, 0.5, 0.02]}, "t")
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.dtick == 1  # no bare "2"/"5" minor labels


def test_many_legend_entries_grow_the_figure_instead_of_hiding():
    from ui.shared import figures
    curves = {f"after token {t}": [3.0, 1.0, 0.1] for t in range(6)}
    fig = figures.singular_spectrum(curves, "t", random_curves=curves)  # 12 entries
    assert fig.layout.legend.orientation == "v" and fig.layout.height >= figures.LEGEND_ROW_PX * 12
    few = figures.singular_spectrum({"after token 1": [1.0]}, "t")
    assert few.layout.legend.orientation == "h" and few.layout.height is None


def test_a_local_directory_is_not_called_trained(tmp_path):
    from ui.shared.labels import weights_name
    assert weights_name(str(tmp_path)) == "loaded weights"
    (tmp_path / "training.json").write_text("{}")
    assert weights_name(str(tmp_path)) == "trained"
    assert weights_name("/home/u/.cache/huggingface/hub/models--org--m/snapshots/abc") == "trained"


def test_spectrum_positions_snap_to_the_nearest_collected_position():
    from ui.shared.choices import snap_to
    # stride 8 → 10 over 64 tokens: 8 and 32 move to 10 and 30 (not dropped, not 0); 63 stays the last token
    assert snap_to([8, 32, 63], [0, 10, 20, 30, 40, 50, 60, 63]) == ([10, 30, 63], [(8, 10), (32, 30)])
    # a shorter text: positions past its end become its last token, once
    assert snap_to([100, 200], [0, 8, 15]) == ([15], [(100, 15), (200, 15)])
    assert snap_to([5], []) == ([], [])


def test_a_short_text_is_read_whole_instead_of_refused():
    from analysis.data.inputs import fit_windows
    assert fit_windows(30, 256, 4) == (30, 1)       # "only 30 tokens, fewer than the 4×256 asked for"
    assert fit_windows(600, 256, 4) == (256, 2)     # whole windows of the asked length where the text has them
    assert fit_windows(2000, 256, 4) == (256, 4)    # long enough: unchanged


def test_positions_carry_their_tokens():
    from ui.shared import figures
    fig = figures.metric_over_positions([0, 1, 2], [0.1, 0.2, 0.3], [0, 0, 0], "u", "t", tokens=["The", " cat", "\n"])
    mean = fig.data[1]
    assert list(mean.text) == ["The", " cat", "'\\n'"] and "%{text}" in mean.hovertemplate
    assert list(fig.layout.xaxis.ticktext) == ["0 The", "1  cat", "2 '\\n'"]


def test_notice_lines_state_what_the_numbers_show():
    from ui.shared import notice
    m = 64
    one = np.full((2, 3), 1 / m)  # every head at u = 1/m, trained and random init alike (qwen35-hybrid-small's story)
    line = notice.rank_map("rank_utilization", "Rank utilization", one * 1.01, m, one)
    assert "about 1/m = 0.0156" in line and "the random-init copy is the same" in line
    spread = np.array([[0.09, 0.06], [0.05, 0.06]])  # deltanet-small-like: several directions, random init higher
    line = notice.rank_map("rank_utilization", "Rank utilization", spread, m, spread + 0.08)
    assert "0.05 (layer 1, head 0) to 0.09 (layer 0, head 0)" in line and "training lowered it" in line
    assert f"a stable rank u · m of about {spread.mean() * m:.1f} (m = 64)" in line
    rise = notice.over_positions([0, 8, 16], [0.1, 0.12, 0.5], ["A", " cat", " sat"])
    assert "from 0.1 after token 0 to 0.5 after token 16" in rise and "largest rise is at token 16 (“sat”)" in rise
    spec = notice.spectrum({"after token 7": [4.0, 1.0, 0.5, 0.1]})
    assert "s₁ is 4× s₂" in spec and "3 of 4 singular values exceed s₁/10" in spec


def test_head_meaning_only_where_value_and_key_heads_differ():
    from types import SimpleNamespace
    from ui.shared.blocks import head_meaning
    hybrid = SimpleNamespace(heads=2, value_heads=4)
    assert "value head (0–3)" in head_meaning(hybrid, "value") and "key head (0–1)" in head_meaning(hybrid, "key")
    assert head_meaning(SimpleNamespace(heads=4, value_heads=4), "value") is None


def test_importance_notices():
    from ui.shared import notice
    masks = {"L1": [1, 1, 0, 0], "Wanda": [1, 0, 1, 0]}
    assert "of the 2 channels each strategy keeps, 1 are kept by all 2; 3 of the 4" in notice.kept_masks(masks)
    line = notice.agreement(["A", "B", "C"], [[1, 0.5, 0.2], [0.5, 1, 0.3], [0.2, 0.3, 1]], 32, 64)
    assert "A and B agree most (J = 0.50), A and C least (J = 0.20)" in line and "= 0.33" in line  # 32/(128−32)
    assert "L1 keeps the most key energy (90.0% " in notice.kept_energy({"L1": [0.9, 0.9], "Random": [0.5, 0.6]}, "key")
    assert notice.top_channels({"L1": [0.1, 3.0], "Wanda": [0.2, 5.0]}).endswith("the same channel for all.")


def test_a_fixed_height_chart_with_many_entries_still_grows_its_legend():
    from ui.state_lab import state_lab_figures as figs
    x = [-10.0, 0.0, 10.0]
    probe = {"snr_db": x, **{k: [1.0, 0.3, 0.1] for k in ("mc_raw", "bound_raw", "mc_renorm", "first_order",
                                                           "second_order", "retrieval_raw")}, "first_valid": [True] * 3,
             "second_valid": [True] * 3}
    fig = figs.noise_curves(probe, 0.0, "t", "valid ≥ 5 dB", "valid ≥ 0 dB")  # 6 entries, asked height 420
    assert fig.layout.legend.orientation == "v" and fig.layout.height >= 400 + 22 * 6
    assert not any("_" in t.name for t in fig.data)  # subscripts, not literal underscores


def test_notice_lines_under_the_sweep_latency_and_sensitivity_charts():
    """Each Shrink chart gets its "Notice:" line from the numbers it shows (issue 23 item 5)."""
    from ui.shared import notice
    points = [{"strategy": "unpruned", "ratio": 0.0, "delta_vs_unpruned": 0.0},
              {"strategy": "l1", "ratio": 0.5, "delta_vs_unpruned": 0.002},
              {"strategy": "random", "ratio": 0.5, "delta_vs_unpruned": 0.68},
              {"strategy": "l1", "ratio": 0.75, "delta_vs_unpruned": 0.021},
              {"strategy": "random", "ratio": 0.75, "delta_vs_unpruned": 3.16}]
    line = notice.sweep(points, {"l1": "L1", "random": "Random"})
    assert "at ρ = 0.75" in line and "L1 loses least (+2.1%)" in line and "Random most (+316.0%)" in line
    assert notice.sweep(points[:1], {}) == ""
    timed = [{"key_dim": 64, "median_ms": 2.0}, {"key_dim": 16, "median_ms": 1.0}]
    assert "dk 16 takes 1 ms and dk 64 2 ms (2.00× the time for 4× dk)" in notice.latency(timed)
    assert notice.latency(timed[:1]) == ""
    losses = [[0.001, 0.010], [0.002, 0.200], [0.0, None]]
    assert notice.sensitivity([0.25, 0.5], losses) == ("Notice: at ρ = 0.25, layer 1 is the most sensitive (the "
                                                       "allocator charges +0.0020) and layer 2 the least (0.0000).")
    full = [[0.001, 0.010], [0.002, 0.200]]
    real = notice.sensitivity([0.25, 0.5], full, [[0.001, 0.002], [0.001, 0.003]])
    assert "at ρ = 0.5, layer 1" in real and "a real choice" in real
    noisy = notice.sensitivity([0.25, 0.5], full, [[0.001, 0.2], [0.001, 0.3]])
    assert "cannot be told apart" in noisy
    hybrid = notice.sensitivity([0.25, 0.5], full, names=["layer 0 (block 0)", "layer 1 (block 2)"])
    assert "layer 1 (block 2) is the most sensitive" in hybrid  # named as the ratio inputs are


def test_notice_under_the_key_dim_bars_counts_the_tiles_drawn():
    """Issue 20: the Model page's key-dim chart gets a Notice computed from the dks it draws."""
    from ui.shared import figures, notice
    dks = [96, 128, 16]  # tiles of 64: 2, 2, 1; last tiles hold 32, 64, 16 rows
    line = notice.key_dims(dks, 64)
    drawn = sum(int(t.split()[0]) for t in figures.key_dim_bars(dks, 64).data[0].text)  # the bars' "N tiles" labels
    assert f"{drawn} tiles of 64 rows per head" in line and drawn == 5
    assert "from 16 (layer 2) to 128 (layer 1)" in line and "2 of 3 layers leave their last tile partly empty" in line
    # layer 2 has only one tile (nothing to free); of the others, layer 0's last tile holds the fewest rows (96 − 64)
    assert "32 per head in layer 0 (ρ = 0.333)" in line
    uniform = notice.key_dims([128] * 4, 64)
    assert "every layer has dk = 128 per head, 2 tiles" in uniform and "64 per head in layer 0 (ρ = 0.5)" in uniform
    assert "partly empty" not in uniform
    assert "cannot free a tile" in notice.key_dims([32, 16], 64)


def test_notice_under_the_recovery_curve_reads_validation_and_loss():
    """Issue 20: the recovery curve's Notice: validation perplexity from step 0 to the best check (the one recover()
    keeps: strictly lower than every earlier check), and whether the training loss moved beyond its noise."""
    from ui.shared import notice
    checks = [{"step": 0, "perplexity": 40.0}, {"step": 10, "perplexity": 35.2}, {"step": 20, "perplexity": 36.0}]
    falling = [{"step": i + 1, "loss": 3 - 0.05 * i + 0.01 * (-1) ** i} for i in range(40)]
    line = notice.recovery(falling, checks)
    assert "fell from 40 at step 0 to 35.2 at step 10 (-12.00%); recovery keeps step 10's weights" in line
    # the first and last quarters' means: 3 − 0.05·4.5 = 2.775 and 3 − 0.05·34.5 = 1.275 (the ±0.01 wiggle cancels)
    assert "loss fell from 2.775 (mean of the first 10 steps) to 1.275 (last 10)" in line
    flat = [{"step": i + 1, "loss": 3 + 0.05 * (-1) ** i} for i in range(40)]
    same = notice.recovery(flat, [checks[0], {"step": 10, "perplexity": 41.0}])
    assert "no validation check improved on step 0's perplexity 40" in same and "flat within its" in same
    rising = [{"step": i + 1, "loss": 3 + 0.05 * i} for i in range(8)]
    assert "loss rose from" in notice.recovery(rising, checks)
    assert "training loss" not in notice.recovery(rising[:7], checks)  # under 8 steps: no quarters to compare
    assert notice.recovery(falling, []) == ""
