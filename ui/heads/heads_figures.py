"""Pure plotly figures of the heads study (lists in, go.Figure out)."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ui.shared.figures import PALETTE, as_list, axes_layout

GROUP_COLORS = {"low": "#1f77b4", "high": "#ff7f0e", "single": "#7f7f7f"}
TEXT_DASHES = ("solid", "dash", "dot", "dashdot")


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
