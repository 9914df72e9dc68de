"""Figure builders: the right traces, axis titles and values from small arrays (no Streamlit involved)."""
import math

import numpy as np
import pytest

from ui.shared import figures
from ui.shared.labels import Provenance, caption, metric_title
from ui.shared.reduce import mean_std


def test_key_dim_bars_mark_tile_boundaries():
    fig = figures.key_dim_bars([64, 96, 32], tile_rows=64)
    bar = fig.data[0]
    assert bar.type == "bar" and list(bar.y) == [64, 96, 32] and list(bar.x) == [0, 1, 2]
    assert list(bar.text) == ["1 tile", "2 tiles", "1 tile"]
    assert sorted(s.y0 for s in fig.layout.shapes) == [64, 128]  # boundaries up to the largest dk
    assert fig.layout.xaxis.title.text == "layer"
    assert "channels" in fig.layout.yaxis.title.text


def test_heatmap_has_clickable_cells_and_marks_the_selection():
    values = np.arange(6, dtype=float).reshape(2, 3)
    values[1, 2] = np.nan
    fig = figures.layer_head_heatmap(values, "Stable rank (directions)", "t", selected=(1, 0), zrange=(0, 5))
    heat, cells = fig.data
    assert heat.type == "heatmap" and heat.z[1][2] is None and list(heat.z[0]) == [0.0, 1.0, 2.0]
    assert (heat.zmin, heat.zmax) == (0, 5)
    assert len(cells.x) == 6 and [list(c) for c in cells.customdata][-1] == [1, 2]
    rect = fig.layout.shapes[0]
    assert (rect.x0, rect.x1, rect.y0, rect.y1) == (-0.5, 0.5, 0.5, 1.5)
    assert fig.layout.xaxis.title.text == "head" and fig.layout.yaxis.title.text == "layer"
    assert fig.layout.yaxis.autorange == "reversed"


def test_metric_over_positions_band_and_random_overlay():
    fig = figures.metric_over_positions([0, 8, 15], [1.0, 2.0, 3.0], [0.5, 0.5, 0.0], "u (fraction)", "t",
                                        random=([1.0, 1.0, 1.0], [0.1, 0.1, 0.1]))
    names = [t.name for t in fig.data]
    assert names == ["trained ± 1 std", "trained (mean)", "random init ± 1 std", "random init (mean)"]
    band = fig.data[0]
    assert list(band.x) == [0, 8, 15, 15, 8, 0] and list(band.y) == [1.5, 2.5, 3.0, 3.0, 1.5, 0.5]
    assert fig.layout.yaxis.title.text == "u (fraction)" and "token position" in fig.layout.xaxis.title.text


def test_singular_spectrum_is_log_scaled_and_one_line_per_position():
    fig = figures.singular_spectrum({"after token 7": [3.0, 1.0, 0.0]}, "t", {"after token 7": [1.0, 1.0, 1.0]})
    assert fig.layout.yaxis.type == "log"
    assert [t.name for t in fig.data] == ["after token 7", "after token 7 (random init)"]
    assert list(fig.data[0].x) == [1, 2, 3]
    assert "singular value" in fig.layout.yaxis.title.text


def test_retrieval_error_plot_draws_predictions_only_where_valid_and_monte_carlo_with_iqr():
    curve = lambda *m: {"median": list(m), "q25": [v * 0.9 for v in m], "q75": [v * 1.1 for v in m]}
    probe = {"name": "direction 1", "predicted_raw": curve(1.0, 0.1), "first_order": curve(3.0, 0.09),
             "second_order": curve(0.7, 0.1), "first_order_valid": [False, False],
             "first_order_valid_from_snr_db": None, "second_order_valid": [False, True],
             "second_order_valid_from_snr_db": 8.6}
    fig = figures.retrieval_error_vs_snr([0, 20], [probe], "t")
    assert [t.mode for t in fig.data] == ["lines"] * 3  # no Monte Carlo yet: predictions only
    assert fig.data[1].name == "direction 1, re-normalised: 2nd order (valid ≥ 8.6 dB)"
    assert list(fig.data[1].y) == [None, 0.1] and list(fig.data[2].y) == [None, None]
    assert "valid nowhere" in fig.data[2].name
    ran = {**probe, "mc_raw_rms": curve(1.0, math.inf), "mc_rms": curve(0.9, 0.1)}
    fig = figures.retrieval_error_vs_snr([0, 20], [ran, {**ran, "name": "real keys"}], "t")
    assert len(fig.data) == 10
    mc = fig.data[3]
    assert mc.mode == "markers" and mc.name == "direction 1, raw query: Monte Carlo"
    assert mc.y[1] is None  # inf cannot be drawn: a gap
    assert mc.error_y.array[0] == pytest.approx(0.1) and mc.error_y.arrayminus[0] == pytest.approx(0.1)
    assert fig.layout.yaxis.type == "log" and "dB" in fig.layout.xaxis.title.text
    assert "median over sequences" in fig.layout.yaxis.title.text


def test_recall_accuracy_plot_has_reference_lines():
    fig = figures.recall_accuracy_vs_snr([0, 10], [0.2, 0.9], clean=0.95, title="t", chance=0.0625)
    assert list(fig.data[0].y) == [0.2, 0.9]
    assert sorted(s.y0 for s in fig.layout.shapes) == [0.0625, 0.95]
    assert "accuracy" in fig.layout.yaxis.title.text and "dB" in fig.layout.xaxis.title.text


def test_labels_and_reductions():
    assert metric_title("stable_rank") == "Stable rank (directions)"
    line = caption(Provenance("m", "Shakespeare test split", 256, 4, "cpu", "float32"), "extra")
    assert line == "m · Shakespeare test split · context 256 tokens × 4 sequences · device cpu · dtype float32 · extra"
    mean, std = mean_std([[1.0, np.nan], [3.0, np.nan]], axis=0)
    assert mean[0] == 2.0 and std[0] == 1.0 and np.isnan(mean[1]) and np.isnan(std[1])


@pytest.mark.parametrize("names,env,expected", [
    (["deltanet-small", "b"], None, ("Bundled sample", "deltanet-small")),
    (["a", "b"], None, ("Bundled sample", "a")),
    (["a", "b"], "b", ("Bundled sample", "b")),
    (["a"], "/definitely/missing", ("Bundled sample", "a")),
    ([], None, ("Local directory", "")),
])
def test_default_model_choice(names, env, expected):
    from ui.shared.sidebar import default_choice
    assert default_choice(names, env) == expected


def test_default_model_choice_takes_a_directory(tmp_path):
    from ui.shared.sidebar import default_choice
    assert default_choice(["a"], str(tmp_path)) == ("Local directory", str(tmp_path))


def test_heatmap_shows_the_value_in_every_hover_and_prints_it_in_small_maps():
    values = np.array([[0.016, 0.019], [0.5, np.nan]])
    heat, cells = figures.layer_head_heatmap(values, "u", "t").data
    assert "%{z" in heat.hovertemplate                       # anywhere in a cell
    assert "%{text}" in cells.hovertemplate and list(cells.text) == ["0.016", "0.019", "0.5", "n/a"]  # its centre
    assert heat.texttemplate == "%{z:.3g}"
    big = figures.layer_head_heatmap(np.zeros((8, 9)), "u", "t").data[0]   # 72 cells: too many to print
    assert big.texttemplate is None


def test_titles_wrap_at_natural_breaks_and_stay_clear_of_the_toolbar():
    long = "Rank utilization of the final state, by layer and head (random init, seed 0)"
    lines = figures.wrap_title(long).split("<br>")
    assert len(lines) == 2 and all(len(line) <= figures.TITLE_CHARS for line in lines)
    assert " ".join(lines) == long
    assert figures.wrap_title("Effective rank (Roy-Vetterli): layer 1, head 0") == \
        "Effective rank (Roy-Vetterli):<br>layer 1, head 0"
    assert figures.wrap_title("Singular spectrum: layer 0, head 0") == "Singular spectrum: layer 0, head 0"
    fig = figures.layer_head_heatmap(np.zeros((2, 2)), "u", long)
    assert fig.layout.title.automargin and fig.layout.title.xanchor == "left"
    assert fig.layout.modebar.orientation == "v"


def test_log_axes_use_exponents_not_si_prefixes():
    spectrum = figures.singular_spectrum({"after token 7": [1.0, 1e-15]}, "t")
    curve = {"median": [1.0], "q25": [0.9], "q75": [1.1]}
    probe = {"name": "d", "predicted_raw": curve, "first_order": curve, "second_order": curve,
             "first_order_valid": [True], "first_order_valid_from_snr_db": 0.0, "second_order_valid": [True],
             "second_order_valid_from_snr_db": 0.0, "mc_raw_rms": curve, "mc_rms": curve}
    noise = figures.retrieval_error_vs_snr([0], [probe], "t")
    for fig in (spectrum, noise):
        assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.exponentformat == "e"
