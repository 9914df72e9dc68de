"""Pure plotly figure of the Sweep page's equal-budget comparison (lists in, go.Figure out)."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ui.shared.figures import PALETTE, axes_layout

KIND_SYMBOLS = {"dk": "circle", "heads": "diamond", "mixed": "x"}


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
