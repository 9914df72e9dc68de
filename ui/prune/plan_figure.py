"""The history of plans as one plotly chart: Δ quality vs fp32 state bytes (pure: plain dicts in, a figure out).

Measured points are markers (one symbol per source), clickable (customdata[0] is the point's id); the uniform
sweep of the chosen strategy is a line; the Pareto front is a dashed step line through ringed points; predicted
plans (the one being typed, the allocator's at its state bytes) are open markers with ±2σ bars.
"""
from __future__ import annotations

from collections.abc import Sequence

import math

import plotly.graph_objects as go

from analysis.shrink.number_format import nats_with_percent, signed
from ui.shared.figures import PALETTE, axes_layout

SOURCES = {"prune": ("circle", "pruned on this page"), "recovered": ("diamond", "after recovery"),
           "verify": ("square", "Verify and choose"), "sweep": ("triangle-up", "sweep point"),
           "saved": ("star", "saved model (output folder)")}
FRONT_COLOR = "#222222"


def _y(p: dict) -> float:
    """The chart's unit: Δ log perplexity in nats/token (the map's, the prediction's and Verify's unit), or Δ recall
    accuracy; a point's delta is perplexity / unpruned − 1."""
    return math.log1p(p["delta"]) if p["metric"] == "ppl" else p["delta"]


def _said(p: dict) -> str:
    """The hover's value: nats/token with the perplexity change beside it."""
    return nats_with_percent(_y(p)) + " nats/token" if p["metric"] == "ppl" else signed(p["delta"])


def _strategy(p: dict) -> str:
    return p["strategy"] + (f", heads: {p['head_strategy']}" if p.get("value_heads") else "")


def history_figure(points: Sequence[dict], front: Sequence[str], strategy: str | None, predicted: Sequence[dict],
                   title: str, y_title: str) -> go.Figure:
    """points: plan_points dicts of one measurement; front: ids on the Pareto front; predicted: {"name",
    "state_bytes", "y", "lo", "hi", "said"} in the y unit (lo/hi: the ±2σ ends; said: the hover's words)."""
    fig = go.Figure()
    sweep = sorted((p for p in points if p["source"] == "sweep" and p["strategy"] == strategy
                    and "recovery" not in p["label"]), key=lambda p: p["state_bytes"])
    if sweep:
        fig.add_trace(go.Scatter(x=[p["state_bytes"] for p in sweep], y=[_y(p) for p in sweep], mode="lines",
                                 name=f"uniform sweep ({strategy})", line=dict(color="#9e9e9e", width=2),
                                 hoverinfo="skip"))
    ordered = sorted((p for p in points if p["id"] in front), key=lambda p: p["state_bytes"])
    if len(ordered) > 1:
        fig.add_trace(go.Scatter(x=[p["state_bytes"] for p in ordered], y=[_y(p) for p in ordered], mode="lines",
                                 line=dict(color=FRONT_COLOR, dash="dash", width=1, shape="hv"),
                                 name="Pareto front (fewest bytes for the least loss)", hoverinfo="skip"))
    strategies = list(dict.fromkeys(p["strategy"] for p in points))
    for source, (symbol, label) in SOURCES.items():
        rows = [p for p in points if p["source"] == source]
        if not rows:
            continue
        fig.add_trace(go.Scatter(
            x=[p["state_bytes"] for p in rows], y=[_y(p) for p in rows], mode="markers", name=label,
            marker=dict(symbol=symbol, size=12, color=[PALETTE[strategies.index(p["strategy"]) % len(PALETTE)]
                                                        for p in rows],
                        line=dict(width=[3 if p["id"] in front else 1 for p in rows],
                                  color=[FRONT_COLOR if p["id"] in front else "white" for p in rows])),
            customdata=[[p["id"], p["label"], _strategy(p), " ".join(map(str, p["head_k_dims"])), p["value"], _said(p)]
                        for p in rows],
            hovertemplate="%{customdata[1]} (%{customdata[2]})<br>dk' %{customdata[3]}<br>%{x:,} state bytes: "
                          "%{customdata[5]} (measured %{customdata[4]:.4f})<br>click: put this plan into the "
                          "inputs<extra></extra>"))
    for n, p in enumerate(predicted):
        fig.add_trace(go.Scatter(x=[p["state_bytes"]], y=[p["y"]], mode="markers", name=f"predicted: {p['name']}",
                                 marker=dict(symbol="diamond-open" if n == 0 else "star-open", size=13,
                                             color=PALETTE[(n + 3) % len(PALETTE)]),
                                 error_y=dict(type="data", symmetric=False, array=[p["hi"] - p["y"]],
                                              arrayminus=[p["y"] - p["lo"]]),
                                 hovertemplate=f"{p['name']}, predicted by the map: {p.get('said', '%{y:+.4f}')} "
                                               "(bars: ±2σ)<extra></extra>"))
    fig.add_hline(y=0, line_dash="dot", line_color="#7f7f7f")
    return axes_layout(fig, title, "fp32 state bytes per sequence", y_title, clickmode="event+select")
