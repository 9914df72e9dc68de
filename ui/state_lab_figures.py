"""Plotly figures of the State lab: plain lists in, go.Figure out (no streamlit, no torch)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ui.figures import LOG_AXIS, PALETTE, RANDOM_COLOR, axes_layout, as_list

RULE_COLORS = {"model": PALETTE[0], "delta": PALETTE[2], "linear": PALETTE[1]}


def _hover_tokens(tokens: Sequence[str]) -> list[str]:
    return [f"{i}: {t!r}" for i, t in enumerate(tokens)]


def state_heatmap(S, title: str) -> go.Figure:
    """S_t [dk, dv] with a colour scale symmetric about 0 (red +, blue −)."""
    z = np.asarray(S, dtype=float)
    top = float(np.abs(z).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=[as_list(row) for row in z], zmin=-top, zmax=top, zmid=0, colorscale="RdBu_r",
                               colorbar=dict(title=dict(text="S[i, j]", side="right")),
                               hovertemplate="key row %{y}, value col %{x}: %{z:.4g}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return axes_layout(fig, title, "value channel j (dv)", "key channel i (dk)", height=420)


def spectrum(values, rank: int, tau: float, title: str, other: Sequence[float] | None = None,
             other_name: str = "") -> go.Figure:
    """Singular values (log y) by index, the numerical rank as a vertical line, τ·s1 as a horizontal one."""
    s = np.asarray(values, dtype=float)
    pos = [v if v > 0 else None for v in as_list(s)]  # log axis: zeros are gaps
    fig = go.Figure(go.Scatter(x=list(range(1, len(s) + 1)), y=pos, mode="lines+markers", name="s_i",
                               line=dict(color=PALETTE[0]), hovertemplate="s_%{x} = %{y:.3g}<extra></extra>"))
    if other is not None:  # e.g. the unpruned head, for comparison
        p = [v if v > 0 else None for v in as_list(other)]
        fig.add_trace(go.Scatter(x=list(range(1, len(p) + 1)), y=p, mode="lines", name=other_name,
                                 line=dict(color=RANDOM_COLOR, dash="dash")))
    if s.size and s[0] > 0:  # both marks named in the legend: text written on the plot collided wherever they met
        floor = tau * float(s[0])
        shown = [v for v in pos if v is not None] + [floor]
        fig.add_trace(go.Scatter(x=[0.5, len(s) + 0.5], y=[floor, floor], mode="lines", name=f"τ·s₁ (τ = {tau:g})",
                                 line=dict(color=RANDOM_COLOR, dash="dot"), hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=[rank + 0.5, rank + 0.5], y=[min(shown) / 2, max(shown) * 2], mode="lines",
                                 name=f"numerical rank {rank}", line=dict(color=PALETTE[1], dash="dash"),
                                 hoverinfo="skip"))
    fig.update_yaxes(**LOG_AXIS)  # one label per decade: no bare "2"/"5" minor labels
    return axes_layout(fig, title, "index i (descending)", "singular value s_i (log)", height=420)


def over_tokens(curves: dict[str, Sequence[float]], t: int, tokens: Sequence[str], title: str, y_title: str,
                log: bool = False, dashed: Sequence[str] = (), colors: Sequence[str] = ()) -> go.Figure:
    """One line per name over token position, the current token t marked (hover shows each token's text)."""
    fig = go.Figure()
    hover = _hover_tokens(tokens)
    for i, (name, ys) in enumerate(curves.items()):
        color = colors[i] if i < len(colors) else PALETTE[i % len(PALETTE)]
        y = as_list(ys)
        fig.add_trace(go.Scatter(x=list(range(len(y))), y=y, mode="lines+markers", name=name, text=hover[:len(y)],
                                 marker=dict(size=4), line=dict(color=color, dash="dash" if name in dashed else None),
                                 hovertemplate="token %{text}: %{y:.4g}<extra>" + name + "</extra>"))
    fig.add_vline(x=t, line_color="black", line_width=1, annotation_text=f"t = {t}", annotation_position="top")
    if log:
        fig.update_yaxes(**LOG_AXIS)
    return axes_layout(fig, title, "token position (hover: the token)", y_title, height=400)


def noise_curves(probe: dict, snr_db: float, title: str, first_label: str, second_label: str,
                 comparison_only: bool = False) -> go.Figure:
    """Monte-Carlo RMS vs SNR (raw and re-normalised query) against the exact raw bound and the series; each order of
    the series is drawn only where it is valid (`first_valid`, `second_valid`), as on the Query noise page.
    comparison_only: the family does not re-normalise q, so the q̂ curves are marked as a comparison."""
    x = probe["snr_db"]
    fig = go.Figure()
    only = " (comparison only)" if comparison_only else ""
    lines = [("Monte Carlo, q = k + ε", "mc_raw", PALETTE[0], "solid", None),
             ("exact RMS σ‖S‖<sub>F</sub>/‖Sᵀk‖", "bound_raw", PALETTE[0], "dot", None),
             (f"Monte Carlo, re-normalised q̂{only}", "mc_renorm", PALETTE[1], "solid", None),
             (f"first order, q̂ ({first_label}){only}", "first_order", PALETTE[2], "dash", "first_valid"),
             (f"second order, q̂ ({second_label}){only}", "second_order", PALETTE[3], "dash", "second_valid")]
    if "retrieval_raw" in probe:
        lines.append(("vs w<sub>j</sub>: ‖Sᵀq − w<sub>j</sub>‖/‖w<sub>j</sub>‖ (exact RMS)", "retrieval_raw", "#000000",
                      "dashdot", None))
    for name, key, color, dash, valid in lines:
        y = as_list(probe[key])
        if valid is not None:  # a truncated series outside its validity is not a prediction: a gap, not a line
            y = [v if ok else None for v, ok in zip(y, probe[valid])]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, line=dict(color=color, dash=dash)))
    fig.add_vline(x=snr_db, line_color="black", line_width=1, annotation_text=f"{snr_db:g} dB",
                  annotation_position="top")
    fig.update_yaxes(**LOG_AXIS)  # one label per decade: no bare "2"/"5" minor labels
    return axes_layout(fig, title, "SNR = ‖k‖²/(dk σ²) (dB)", "relative error (RMS, log)",
                   height=420)
