"""Pure plotly builders for the Shrink pages (importance, prune, sweep): lists in, go.Figure out.

Same conventions as ui.shared.figures (no streamlit, no torch): every axis has a title with its unit, and PCA,
which rotates the channels instead of choosing some, is labelled "rotation, not axis-aligned" wherever
it appears.
"""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ui.shared.figures import PALETTE, RANDOM_COLOR, axes_layout, as_list

KEPT_COLOR, DROPPED_COLOR = PALETTE[0], "#c8c8c8"
PCA_NOTE = "rotation, not axis-aligned"

def score_bars(scores: Sequence[float], kept: Sequence[int] | None, label: str, title: str, unit: str = "score",
               axis_aligned: bool = True) -> go.Figure:
    """One head's channel scores, kept channels coloured (`unit`: the strategy's score_unit); a rotating
    strategy (PCA): its score per direction, the first k kept.

    kept: 0/1 per channel (axis-aligned strategies) or the number of kept directions as [k] for a rotation.
    """
    values = as_list(scores)
    if not axis_aligned:
        k = int(kept[0]) if kept else 0
        mask = [i < k for i in range(len(values))]
        x_title, what = f"principal direction ({PCA_NOTE})", "direction"
    else:
        mask = [bool(v) for v in kept] if kept is not None else [True] * len(values)
        x_title, what = "query/key channel index within the head", "channel"
    fig = go.Figure()
    for keep, color, suffix in ((True, KEPT_COLOR, "kept"), (False, DROPPED_COLOR, "pruned")):
        x = [i for i, m in enumerate(mask) if m == keep]
        fig.add_trace(go.Bar(x=x, y=[values[i] for i in x], name=f"{suffix} {what}s", marker_color=color,
                             hovertemplate=f"{what} %{{x}}: %{{y:.4g}}<extra>{suffix}</extra>"))
    fig.update_layout(barmode="overlay", bargap=0.1)
    return axes_layout(fig, title or label, x_title, unit)


def kept_mask_heatmap(masks: dict[str, Sequence[int]], title: str) -> go.Figure:
    """Strategies (rows) × channels (columns): 1 = kept. Only axis-aligned strategies have a mask."""
    labels = list(masks)
    z = [[int(v) for v in masks[name]] for name in labels]
    fig = go.Figure(go.Heatmap(z=z, y=labels, x=list(range(len(z[0]) if z else 0)), zmin=0, zmax=1,
                               colorscale=[[0, DROPPED_COLOR], [0.5, DROPPED_COLOR], [0.5, KEPT_COLOR], [1, KEPT_COLOR]],
                               colorbar=dict(title=dict(text="kept (1) / pruned (0)", side="right"),
                                             tickvals=[0, 1], ticktext=["pruned", "kept"]),
                               xgap=1, ygap=2, hovertemplate="%{y}, channel %{x}: %{z}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return axes_layout(fig, title, "query/key channel index within the head", "strategy")


def agreement_heatmap(labels: Sequence[str], matrix: Sequence[Sequence[float]], title: str) -> go.Figure:
    """Jaccard |A∩B|/|A∪B| of kept sets between strategies, values written in the cells."""
    z = [as_list(row) for row in matrix]
    fig = go.Figure(go.Heatmap(z=z, x=list(labels), y=list(labels), zmin=0, zmax=1, colorscale="Blues",
                               text=[[f"{v:.2f}" if v is not None else "" for v in row] for row in z],
                               texttemplate="%{text}", colorbar=dict(title=dict(text="Jaccard (fraction)", side="right")),
                               hovertemplate="%{y} vs %{x}: %{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return axes_layout(fig, title, "strategy", "strategy")


def kept_energy_bars(energy: dict[str, Sequence[float]], which: str, title: str) -> go.Figure:
    """Per layer, the fraction of the post-conv {query, key} activation energy on the kept channels."""
    fig = go.Figure()
    for n, (label, per_layer) in enumerate(energy.items()):
        values = as_list(per_layer)
        fig.add_trace(go.Bar(x=list(range(len(values))), y=values, name=label, marker_color=PALETTE[n % len(PALETTE)],
                             hovertemplate=f"{label}, layer %{{x}}: %{{y:.3f}}<extra></extra>"))
    fig.update_layout(barmode="group")
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(range=[0, 1.05])
    return axes_layout(fig, title, "layer", f"kept {which} energy ‖P x‖² / ‖x‖² (fraction)")


def key_dim_plan(original: Sequence[int], planned: Sequence[int], tile_rows: int = 64) -> go.Figure:
    """dk before and dk' after per layer, dashed lines at the kernel's tile boundaries."""
    layers = list(range(len(original)))
    tiles = [-(-int(d) // tile_rows) for d in planned]
    fig = go.Figure([
        go.Bar(x=layers, y=[int(d) for d in original], name="dk now", marker_color=DROPPED_COLOR,
               hovertemplate="layer %{x}: dk = %{y}<extra></extra>"),
        go.Bar(x=layers, y=[int(d) for d in planned], name="dk' after pruning", marker_color=KEPT_COLOR,
               text=[f"{t} tile{'s' if t != 1 else ''}" for t in tiles], textposition="outside",
               hovertemplate="layer %{x}: dk' = %{y}<extra></extra>")])
    top = max([int(d) for d in original] + [tile_rows])
    for boundary in range(tile_rows, top + tile_rows, tile_rows):
        fig.add_hline(y=boundary, line_dash="dash", line_color=RANDOM_COLOR,
                      annotation_text=f"{boundary // tile_rows}×{tile_rows} rows", annotation_position="top left")
    fig.update_layout(barmode="group")
    fig.update_xaxes(dtick=1)
    return axes_layout(fig, f"Planned key dim per head (kernel tiles of {tile_rows} rows)", "layer",
                   "key dim per head (channels)")


DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")


def sweep_figure(points: Sequence[dict], labels: dict[str, str], title: str, y_title: str) -> go.Figure:
    """Perplexity vs ratio, one line per strategy, the unpruned baseline as a line.

    Each strategy has its own colour, dash style and marker symbol (markers shrink along the list), so
    strategies with equal values (L1 under Wanda) stay visible on top of each other; recovered points are
    open markers on a thin line of the same colour.
    """
    fig = go.Figure()
    names = [n for n in dict.fromkeys(p["strategy"] for p in points) if n != "unpruned"]
    for n, name in enumerate(names):
        rows = sorted((p for p in points if p["strategy"] == name), key=lambda p: p["ratio"])
        color, label = PALETTE[n % len(PALETTE)], labels.get(name, name)
        dash, symbol = DASHES[n % len(DASHES)], SYMBOLS[n % len(SYMBOLS)]
        fig.add_trace(go.Scatter(x=[p["ratio"] for p in rows], y=as_list([p["perplexity"] for p in rows]),
                                 mode="lines+markers", name=label, line=dict(color=color, dash=dash, width=2.5),
                                 marker=dict(symbol=symbol, size=max(6, 14 - 2 * n), color=color,
                                             line=dict(width=1, color="white")),
                                 customdata=[[str(p["head_k_dims"]), _pct(p.get("delta_vs_unpruned"))] for p in rows],
                                 hovertemplate=f"{label}<br>ρ = %{{x}}: %{{y:.3f}} (%{{customdata[1]}} vs unpruned; "
                                               f"dk %{{customdata[0]}})<extra></extra>"))
        recovered = [p for p in rows if "recovered_perplexity" in p]
        if recovered:
            fig.add_trace(go.Scatter(x=[p["ratio"] for p in recovered],
                                     y=as_list([p["recovered_perplexity"] for p in recovered]), mode="lines+markers",
                                     name=f"{label}, after recovery", line=dict(color=color, dash=dash, width=1),
                                     marker=dict(symbol=f"{symbol}-open", size=10, color=color)))
    for p in points:
        if p["strategy"] == "unpruned":
            fig.add_hline(y=float(p["perplexity"]), line_dash="dash", line_color=RANDOM_COLOR,
                          annotation_text=f"unpruned {p['perplexity']:.3f}", annotation_position="top left")
    fig.update_xaxes(range=[-0.02, 1.0])
    return axes_layout(fig, title, "pruning ratio ρ (fraction of key channels removed)", y_title)


def accuracy_figure(points: Sequence[dict], labels: dict[str, str], task: str) -> go.Figure:
    """One lm-evaluation-harness task's accuracy vs ratio, one line per strategy with the harness's standard
    errors as error bars, the unpruned model and (for a local task) the chance level as horizontal lines."""
    fig = go.Figure()
    rows = [p for p in points if (p.get("tasks") or {}).get(task, {}).get("accuracy") is not None]
    names = [n for n in dict.fromkeys(p["strategy"] for p in rows) if n != "unpruned"]
    for n, name in enumerate(names):
        mine = sorted((p for p in rows if p["strategy"] == name), key=lambda p: p["ratio"])
        color, label = PALETTE[n % len(PALETTE)], labels.get(name, name)
        fig.add_trace(go.Scatter(x=[p["ratio"] for p in mine], y=[p["tasks"][task]["accuracy"] for p in mine],
                                 error_y=dict(type="data", array=[p["tasks"][task].get("accuracy_stderr") or 0
                                                                  for p in mine], visible=True),
                                 mode="lines+markers", name=label,
                                 line=dict(color=color, dash=DASHES[n % len(DASHES)], width=2.5),
                                 marker=dict(symbol=SYMBOLS[n % len(SYMBOLS)], size=max(6, 14 - 2 * n), color=color),
                                 hovertemplate=f"{label}<br>ρ = %{{x}}: %{{y:.3f}} ± %{{error_y.array:.3f}}"
                                               "<extra></extra>"))
    some = next(iter(rows), None)
    for p in rows:
        if p["strategy"] == "unpruned":
            t = p["tasks"][task]
            fig.add_hline(y=float(t["accuracy"]), line_dash="dash", line_color=RANDOM_COLOR,
                          annotation_text=f"unpruned {t['accuracy']:.3f} ± {t.get('accuracy_stderr') or 0:.3f}",
                          annotation_position="top left")
    chance = some["tasks"][task].get("chance") if some else None
    if chance is not None:
        fig.add_hline(y=float(chance), line_dash="dot", line_color="#999999", annotation_text=f"chance {chance:.3g}",
                      annotation_position="bottom right")
    metric = some["tasks"][task]["metric"] if some else "accuracy"
    docs = f", {some['tasks'][task]['docs']:,} docs" if some else ""
    fig.update_xaxes(range=[-0.02, 1.0])
    return axes_layout(fig, f"{task}: {metric} vs pruning ratio (± harness standard error{docs})",
                       "pruning ratio ρ (fraction of key channels removed)", f"{metric} (fraction correct)")


def _pct(x) -> str:
    return f"{x:+.1%}" if isinstance(x, (int, float)) else "n/a"


NOISY_COLOR = "#d62728"


def latency_figure(points: Sequence[dict], title: str, tile_rows: int = 64,
                   key_dims: Sequence[int] = ()) -> go.Figure:
    """Kernel time vs key dim (point by point): the median with IQR error bars (hover: min–max and repeats),
    noisy points (IQR > 20 % of the median) ringed in red, dotted lines at the tile boundaries.

    key_dims: the dims still to be timed, so the axis and its boundaries are in place before the first point.
    """
    rows = sorted(points, key=lambda p: p["key_dim"])
    med = [p["median_ms"] for p in rows]
    fig = go.Figure(go.Scatter(
        x=[p["key_dim"] for p in rows], y=as_list(med), mode="lines+markers", name="median (bars: IQR)",
        error_y=dict(type="data", symmetric=False, array=[p["spread"]["q3_ms"] - m for p, m in zip(rows, med)],
                     arrayminus=[m - p["spread"]["q1_ms"] for p, m in zip(rows, med)], thickness=1.5, width=6),
        customdata=[[p["tiles"], p["spread"]["q1_ms"], p["spread"]["q3_ms"], p["spread"]["min_ms"],
                     p["spread"]["max_ms"], p["repeats"], "  NOISY" if p["noisy"] else ""] for p in rows],
        hovertemplate="dk %{x} (%{customdata[0]} tiles): %{y:.3f} ms median<br>IQR %{customdata[1]:.3f}–"
                      "%{customdata[2]:.3f}, min–max %{customdata[3]:.3f}–%{customdata[4]:.3f} ms, "
                      "%{customdata[5]} repeats%{customdata[6]}<extra></extra>"))
    noisy = [p for p in rows if p["noisy"]]
    if noisy:
        fig.add_trace(go.Scatter(x=[p["key_dim"] for p in noisy], y=as_list([p["median_ms"] for p in noisy]),
                                 mode="markers", name="noisy: IQR > 20 % of median",
                                 marker=dict(symbol="circle-open", size=16, color=NOISY_COLOR, line=dict(width=2)),
                                 hoverinfo="skip"))
    top = max([p["key_dim"] for p in rows] + [int(d) for d in key_dims] + [tile_rows])
    for boundary in range(tile_rows, top + 1, tile_rows):
        fig.add_vline(x=boundary, line_dash="dot", line_color=RANDOM_COLOR,
                      annotation_text=f"tile boundary {boundary}", annotation_position="top")
    fig.update_xaxes(range=[0, top * 1.05])
    fig.update_yaxes(rangemode="tozero")
    return axes_layout(fig, title, "key dim dk per head (channels)", "kernel time (ms, median; bars: IQR)")
