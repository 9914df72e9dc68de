"""Figure builders, tables and input parsing of the Shrink pages (pure: no Streamlit, no model)."""
import json

import pytest

from analysis.errors import AnalysisError
from analysis.shrink.strategies import get_strategy
from ui.shared import shrink_figures as sf
from ui.shared.parse import number_list
from ui.shared.shrink_report import (KERNEL_ROW, before_after_table, latency_table, points_csv, points_json,
                                     recovery_verdict, sweep_table)


def test_score_bars_split_kept_and_pruned_channels():
    unit = get_strategy("l1").score_unit
    fig = sf.score_bars([0.5, 2.0, 1.0, 3.0], [0, 1, 0, 1], "L1 magnitude", "L1 magnitude", unit)
    kept, pruned = fig.data
    assert (kept.name, list(kept.x), list(kept.y)) == ("kept channels", [1, 3], [2.0, 3.0])
    assert (pruned.name, list(pruned.x)) == ("pruned channels", [0, 2])
    assert fig.layout.xaxis.title.text == "query/key channel index within the head"
    assert fig.layout.yaxis.title.text == unit


def test_pca_bars_are_directions_labelled_as_a_rotation():
    pca = get_strategy("pca")
    fig = sf.score_bars([3.0, 2.0, 1.0], [2], "PCA", "PCA (rotation, not axis-aligned)", pca.score_unit, pca.axis_aligned)
    assert list(fig.data[0].x) == [0, 1] and fig.data[0].name == "kept directions"
    assert "rotation, not axis-aligned" in fig.layout.xaxis.title.text
    assert "explained variance" in fig.layout.yaxis.title.text


def test_mask_agreement_and_energy_figures():
    mask = sf.kept_mask_heatmap({"Random": [1, 0, 1], "L1": [0, 1, 1]}, "t").data[0]
    assert [list(r) for r in mask.z] == [[1, 0, 1], [0, 1, 1]] and list(mask.y) == ["Random", "L1"]
    agree = sf.agreement_heatmap(["A", "B"], [[1.0, 0.25], [0.25, 1.0]], "t").data[0]
    assert (agree.zmin, agree.zmax) == (0, 1) and agree.text[0][1] == "0.25"
    energy = sf.kept_energy_bars({"A": [0.5, 0.75], "B": [0.25, float("nan")]}, "key", "t")
    assert [list(t.y) for t in energy.data] == [[0.5, 0.75], [0.25, None]]
    assert energy.layout.yaxis.title.text == "kept key energy ‖P x‖² / ‖x‖² (fraction)"


def test_key_dim_plan_shows_both_dims_and_tile_lines():
    fig = sf.key_dim_plan([128, 96], [64, 80])
    now, after = fig.data
    assert list(now.y) == [128, 96] and list(after.y) == [64, 80] and list(after.text) == ["1 tile", "2 tiles"]
    assert sorted(s.y0 for s in fig.layout.shapes) == [64, 128]


def point(strategy, ratio, ppl, **extra):
    return {"strategy": strategy, "ratio": ratio, "perplexity": ppl, "head_k_dims": [16, 16], **extra}


def test_sweep_figure_one_line_per_strategy_and_the_baseline():
    points = [point("unpruned", 0.0, 10.0), point("l1", 0.5, 14.0), point("random", 0.5, 20.0),
              point("l1", 0.25, 11.0, recovered_perplexity=10.5)]
    fig = sf.sweep_figure(points, {"l1": "L1 magnitude"}, "t", "perplexity (test split)")
    lines = {t.name: (list(t.x), list(t.y)) for t in fig.data}
    assert lines == {"L1 magnitude": ([0.25, 0.5], [11.0, 14.0]), "L1 magnitude, after recovery": ([0.25], [10.5]),
                     "random": ([0.5], [20.0])}
    assert [s.y0 for s in fig.layout.shapes] == [10.0]
    assert fig.layout.xaxis.title.text == "pruning ratio ρ (fraction of key channels removed)"


def timed(dk, ms, iqr=0.1, noisy=False):
    return {"key_dim": dk, "ms": ms, "median_ms": ms, "tiles": -(-dk // 64), "repeats": 15, "threads": 1,
            "noisy": noisy, "spread": {"q1_ms": ms - iqr / 2, "q3_ms": ms + iqr, "iqr_ms": 1.5 * iqr,
                                       "min_ms": ms - iqr, "max_ms": ms + 2 * iqr, "iqr_over_median": 1.5 * iqr / ms}}


def test_latency_figure_marks_tile_boundaries_error_bars_and_noisy_points():
    pts = [timed(130, 13.0), timed(16, 1.6, iqr=1.0, noisy=True), timed(64, 6.4)]
    fig = sf.latency_figure(pts, "t")
    assert list(fig.data[0].x) == [16, 64, 130] and [s.x0 for s in fig.layout.shapes] == [64, 128]
    assert list(fig.data[0].error_y.array) == pytest.approx([1.0, 0.1, 0.1])       # q3 − median
    assert list(fig.data[0].error_y.arrayminus) == pytest.approx([0.5, 0.05, 0.05])  # median − q1
    assert fig.data[1].name == "noisy: IQR > 20 % of median" and list(fig.data[1].x) == [16]
    assert fig.layout.yaxis.title.text == "kernel time (ms, median; bars: IQR)"
    empty = sf.latency_figure([], "t", key_dims=[16, 200])  # axis and boundaries before the first point
    assert [s.x0 for s in empty.layout.shapes] == [64, 128, 192] and list(empty.data[0].x) == []
    table = latency_table(pts)
    assert table["dk"].tolist() == [16, 64, 130] and table["repeats"].tolist() == [15] * 3
    assert table["noisy (IQR > 20 % of median)"].tolist() == ["yes", "no", "no"]
    assert table["IQR (ms)"].tolist() == pytest.approx([1.5, 0.15, 0.15])


def test_overlapping_strategies_get_distinct_dashes_and_markers():
    points = [point("unpruned", 0.0, 10.0), point("l1", 0.5, 14.0, delta_vs_unpruned=0.4),
              point("wanda", 0.5, 14.0, delta_vs_unpruned=0.4)]
    l1, wanda = sf.sweep_figure(points, {}, "t", "y").data
    assert (l1.line.dash, l1.marker.symbol) != (wanda.line.dash, wanda.marker.symbol)
    assert l1.line.dash != wanda.line.dash and l1.marker.size > wanda.marker.size  # the upper one smaller
    table = sweep_table(points, {"l1": "L1"})
    assert table["strategy"].tolist() == ["unpruned", "L1", "wanda"]
    assert table["Δ% vs unpruned"].tolist() == [0.0, 0.4, 0.4]


def measured(dims, ppl):
    return {"head_k_dims": dims, "tiles": [1] * len(dims), "parameters": 1000, "state_bytes_per_sequence": 4096,
            "perplexity": {"perplexity": ppl, "bits_per_byte": 1.5, "dataset": "Shakespeare test split",
                           "context": 64, "stride": 64, "tokens": 512}}


def test_before_after_table_names_its_settings_and_carries_delta_and_percent():
    table = before_after_table({"before": measured([32], 10.0), "after": measured([16], 12.5),
                                "recovered": measured([16], 9.0)})
    row = "perplexity (Shakespeare test split, context 64, stride 64, 512 tokens)"
    assert list(table.columns) == ["before", "after", "Δ after", "% after", "recovered", "Δ recovered",
                                   "% recovered"]
    assert table.loc[row].tolist() == ["10.000", "12.500", "+2.500", "+25.0%", "9.000", "−1.000", "−10.0%"]
    assert table.loc["key dim per head, by layer"].tolist() == ["32", "16", "—", "—", "16", "—", "—"]
    assert table.loc["parameters"].tolist()[2:4] == ["±0", "±0.0%"]


def test_before_after_table_names_the_method_of_each_column_first():
    """Issue 22: the table names the recovery method that made its "after recovery" column."""
    table = before_after_table({"before": measured([32], 10.0), "after recovery": measured([16], 9.0)},
                               methods={"before": "unpruned", "after recovery": "lora-kd, 5 steps"})
    assert table.index[0] == "method"
    assert table.loc["method"].tolist() == ["unpruned", "lora-kd, 5 steps", "—", "—"]


def test_kernel_rows_show_median_iqr_and_repeats():
    before, after = measured([32], 10.0), measured([16], 10.0)
    before["kernel"], after["kernel"] = timed(32, 2.0), timed(16, 1.0, noisy=True)
    table = before_after_table({"before": before, "after": after})
    assert table.loc[KERNEL_ROW].tolist() == ["2.000", "1.000", "−1.000", "−50.0%"]
    assert table.loc["kernel time: repeats"].tolist()[:2] == ["15, 1 CPU thread",
                                                              "15, 1 CPU thread — noisy (IQR > 20 % of median)"]
    assert table.loc["kernel time: IQR (ms) · min–max (ms)"].tolist()[0] == "0.150 · 1.900–2.200"


def test_a_kernel_change_inside_the_timings_spread_is_said_to_be_noise():
    """Issue 20: a noisy CPU timing was headlined as "+31 %"."""
    before, after = measured([32], 10.0), measured([16], 10.0)
    before["kernel"], after["kernel"] = timed(32, 1.0, iqr=0.3), timed(16, 1.31, iqr=0.1)  # IQRs 0.45 and 0.15
    row = before_after_table({"before": before, "after": after}).loc[KERNEL_ROW].tolist()
    assert row[2:] == ["+0.310 (within noise)", "within noise (IQR 0.450)"]


def with_task(m: dict, accuracy: float, stderr: float) -> dict:
    return {**m, "harness": "lm-evaluation-harness 0.4.13",
            "tasks": {"shakespeare_word_order": {"metric": "acc", "accuracy": accuracy, "accuracy_stderr": stderr,
                                                 "docs": 100, "num_fewshot": 0, "chance": 0.25}}}


def test_task_accuracy_rows_carry_the_harness_standard_error_and_call_a_small_change_noise():
    """Issue 33: accuracy ± the harness's standard error; a change within 2 × the combined SE is noise."""
    row = "shakespeare_word_order: acc (100 docs, 0-shot; ± harness standard error)"
    near = before_after_table({"before": with_task(measured([32], 10.0), 0.80, 0.04),
                               "after": with_task(measured([16], 10.0), 0.72, 0.045)}).loc[row].tolist()
    assert near == ["0.800 ± 0.040", "0.720 ± 0.045", "−0.080 (within noise)", "within noise (2 SE 0.120)"]
    far = before_after_table({"before": with_task(measured([32], 10.0), 0.80, 0.04),
                              "after": with_task(measured([16], 10.0), 0.40, 0.05)}).loc[row].tolist()
    assert far[2:] == ["−0.400", "−50.0%"]


def test_accuracy_figure_has_error_bars_the_unpruned_line_and_chance():
    points = [{**with_task(point("unpruned", 0.0, 10.0), 0.8, 0.04)},
              {**with_task(point("l1", 0.5, 11.0), 0.7, 0.05)}, {**with_task(point("l1", 0.75, 12.0), 0.5, 0.05)}]
    fig = sf.accuracy_figure(points, {"l1": "L1"}, "shakespeare_word_order")
    [line] = fig.data
    assert (line.name, list(line.x), list(line.y), list(line.error_y.array)) == ("L1", [0.5, 0.75], [0.7, 0.5],
                                                                                   [0.05, 0.05])
    notes = [a.text for a in fig.layout.annotations]
    assert "unpruned 0.800 ± 0.040" in notes and "chance 0.25" in notes
    assert fig.layout.yaxis.title.text == "acc (fraction correct)" and "100 docs" in fig.layout.title.text
    table = sweep_table(points, {"l1": "L1"})
    assert table["shakespeare_word_order (acc)"].tolist() == [0.8, 0.7, 0.5]


def test_points_export_as_csv_and_json():
    pts = [point("unpruned", 0.0, 10.0), point("l1", 0.5, 14.0)]
    csv = points_csv(pts).splitlines()
    assert csv[0] == "strategy,ratio,perplexity,head_k_dims" and csv[2] == 'l1,0.5,14.0,"16, 16"'
    assert json.loads(points_json(pts, {"context": 64}))["results"][1]["head_k_dims"] == [16, 16]


def test_number_list_parses_and_rejects_in_one_sentence():
    assert number_list("0.25, 0.5;0.5", "ratios", 0, 1) == [0.25, 0.5]
    assert number_list("16,32", "dims", 1, 257, integer=True) == [16, 32]
    for text, message in [("a, b", "comma-separated numbers"), ("", "at least one"), ("1.5", "at least 0 and below 1")]:
        with pytest.raises(AnalysisError, match=message):
            number_list(text, "ratios", 0, 1)


def test_recovery_verdict_says_worse_when_perplexity_rises():
    worse = recovery_verdict(measured([16], 100.79), measured([16], 101.85))
    assert worse["verdict"] == "worse" and "100.79 → 101.85 (+1.05%" in worse["text"]
    assert recovery_verdict(measured([16], 12.0), measured([16], 11.0))["verdict"] == "better"
    other = measured([16], 11.0)
    other["perplexity"]["context"] = 128
    assert recovery_verdict(measured([16], 12.0), other)["verdict"] == "not comparable"
