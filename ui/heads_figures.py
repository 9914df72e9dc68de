"""Pure plotly figures of the heads study and the equal-budget comparison (lists in, go.Figure out)."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ui.figures import PALETTE, as_list, axes_layout

GROUP_COLORS = {"low": "#1f77b4", "high": "#ff7f0e", "single": "#7f7f7f"}
TEXT_DASHES = ("solid", "dash", "dot", "dashdot")
KIND_SYMBOLS = {"dk": "circle", "heads": "diamond", "mixed": "x"}


def head_trajectories(positions: Sequence[int], per_text: Sequence[Sequence[Sequence[float]]],
                      groups: Sequence[Sequence[str]], texts: Sequence[str], title: str) -> go.Figure:
    """One layer's heads: effective rank over token position, one line per head and input (dash per input),
    coloured by the head's group on that input (low-rank blue, high-rank orange)."""
    fig = go.Figure()
    shown = set()
    for t, (rows, labels, text) in enumerate(zip(per_text, groups, texts)):
        for head, (row, group) in enumerate(zip(rows, labels)):
            legend = group not in shown
            shown.add(group)
            fig.add_trace(go.Scatter(
                x=list(positions), y=as_list(row), mode="lines", name=f"{group}-rank head" if legend else None,
                showlegend=legend, legendgroup=group, line=dict(color=GROUP_COLORS[group], dash=TEXT_DASHES[t % 4]),
                hovertemplate=f"head {head} ({group}-rank) on {text}<br>after token %{{x}}: erank %{{y:.3g}}"
                              "<extra></extra>"))
    fig.update_yaxes(type="log", exponentformat="e")
    return axes_layout(fig, title, "token position", "effective rank (log scale)")


def head_scores(scores: dict[str, Sequence[float]], kept: dict[str, Sequence[int]], labels: dict[str, str],
                title: str) -> go.Figure:
    """One layer's head scores per strategy, each standardised over the layer's heads (z) so strategies share an
    axis; kept heads drawn filled, removed ones hollow."""
    fig = go.Figure()
    for i, (name, values) in enumerate(scores.items()):
        vals = [float(v) for v in values]
        mean = sum(vals) / len(vals)
        std = (sum((v - mean) ** 2 for v in vals) / len(vals)) ** 0.5 or 1.0
        z = [(v - mean) / std for v in vals]
        kept_set = set(kept.get(name, []))
        fig.add_trace(go.Scatter(
            x=list(range(len(vals))), y=z, mode="markers+lines", name=labels.get(name, name),
            line=dict(color=PALETTE[i % len(PALETTE)], width=1),
            marker=dict(size=11, symbol=["circle" if h in kept_set else "circle-open" for h in range(len(vals))]),
            customdata=vals, hovertemplate="head %{x}: score %{customdata:.4g} (z %{y:.2f})<extra>" + name + "</extra>"))
    fig.update_xaxes(dtick=1)
    return axes_layout(fig, title, "value head", "score, standardised over the layer's heads (z)")


def budget_chart(points: Sequence[dict], title: str) -> go.Figure:
    """Δ log perplexity (± paired SE) against the state bytes each plan keeps: dk plans, head plans and mixed
    plans on one axis, one colour per strategy (pair), one marker per kind."""
    fig = go.Figure()
    series: dict[tuple, list[dict]] = {}
    for p in points:
        if p["kind"] != "unpruned":
            series.setdefault((p["kind"], p["strategy"], p["head_strategy"]), []).append(p)
    for i, ((kind, strategy, head), rows) in enumerate(series.items()):
        rows = sorted(rows, key=lambda p: p["state_bytes_per_sequence"])
        name = {"dk": f"dk: {strategy}", "heads": f"heads: {head}", "mixed": f"mixed: {strategy} + {head}"}[kind]
        fig.add_trace(go.Scatter(
            x=[p["state_bytes_per_sequence"] for p in rows], y=[p["delta_log_ppl"] for p in rows],
            error_y=dict(type="data", array=[p["se"] for p in rows], visible=True), mode="lines+markers", name=name,
            marker=dict(symbol=KIND_SYMBOLS[kind], size=9), line=dict(color=PALETTE[i % len(PALETTE)],
                                                                      dash="solid" if kind == "dk" else "dash"),
            hovertemplate=name + "<br>%{x:,} state bytes per sequence<br>Δ log ppl %{y:+.4f}<extra></extra>"))
    fig.add_hline(y=0, line_color="#7f7f7f", line_dash="dot")
    return axes_layout(fig, title, "state bytes per sequence (fp32)", "Δ log perplexity vs unpruned (± paired SE)")
