"""Plotly figures of the State lab: plain lists in, go.Figure out (no streamlit, no torch)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from ui.shared.figures import LOG_AXIS, PALETTE, RANDOM_COLOR, as_list, quick_figure

RULE_COLORS = {"model": PALETTE[0], "delta": PALETTE[2], "linear": PALETTE[1]}


def _hover_tokens(tokens: Sequence[str]) -> list[str]:
    return [f"{i}: {t!r}" for i, t in enumerate(tokens)]


def state_heatmap(S, title: str) -> go.Figure:
    """S_t [dk, dv] with a colour scale symmetric about 0 (red +, blue −)."""
    z = np.asarray(S, dtype=float)
    top = float(np.abs(z).max()) or 1.0
    cells = np.where(np.isfinite(z), z, np.nan).tolist()  # NaN/inf → JSON null: a gap
    trace = dict(type="heatmap", z=cells, zmin=-top, zmax=top, zmid=0, colorscale="RdBu_r",
                 colorbar=dict(title=dict(text="S[i, j]", side="right")),
                 hovertemplate="key row %{y}, value col %{x}: %{z:.4g}<extra></extra>")
    return quick_figure([trace], title, "value channel j (dv)", "key channel i (dk)", height=420,
                        yaxis=dict(autorange="reversed"))


def spectrum(values, rank: int, tau: float, title: str, other: Sequence[float] | None = None,
             other_name: str = "") -> go.Figure:
    """Singular values (log y) by index, the numerical rank as a vertical line, τ·s1 as a horizontal one; both lines
    named in the legend (text written on the plot collided wherever the two met)."""
    s = np.asarray(values, dtype=float)
    pos = [v if v > 0 else None for v in as_list(s)]  # log axis: zeros are gaps
    traces = [dict(type="scatter", x=list(range(1, len(s) + 1)), y=pos, mode="lines+markers", name="s_i",
                   line=dict(color=PALETTE[0]), hovertemplate="s_%{x} = %{y:.3g}<extra></extra>")]
    if other is not None:  # e.g. the unpruned head, for comparison
        p = [v if v > 0 else None for v in as_list(other)]
        traces.append(dict(type="scatter", x=list(range(1, len(p) + 1)), y=p, mode="lines", name=other_name,
                           line=dict(color=RANDOM_COLOR, dash="dash")))
    if s.size and s[0] > 0:
        floor = tau * float(s[0])
        shown = [v for v in pos if v is not None] + [floor]
        traces += [dict(type="scatter", x=[0.5, len(s) + 0.5], y=[floor, floor], mode="lines", hoverinfo="skip",
                        name=f"τ·s₁ (τ = {tau:g})", line=dict(color=RANDOM_COLOR, dash="dot")),
                   dict(type="scatter", x=[rank + 0.5, rank + 0.5], y=[min(shown) / 2, max(shown) * 2], mode="lines",
                        name=f"numerical rank {rank}", line=dict(color=PALETTE[1], dash="dash"), hoverinfo="skip")]
    # one label per decade: no bare "2"/"5" minor labels
    return quick_figure(traces, title, "index i (descending)", "singular value s_i (log)", height=420, yaxis=LOG_AXIS)


def marker(t: int) -> dict:
    """The current token t as a vertical line with its label (layout shapes: cheaper than plotly's add_vline)."""
    return dict(shapes=[dict(type="line", x0=t, x1=t, xref="x", y0=0, y1=1, yref="paper",
                             line=dict(color="black", width=1))],
                annotations=[dict(x=t, xref="x", y=1, yref="paper", text=f"t = {t}", showarrow=False,
                                  yanchor="bottom")])


def over_tokens(curves: dict[str, Sequence[float]], t: int, tokens: Sequence[str], title: str, y_title: str,
                log: bool = False, dashed: Sequence[str] = (), colors: Sequence[str] = ()) -> go.Figure:
    """One line per name over token position, the current token t marked (hover shows each token's text)."""
    hover = _hover_tokens(tokens)
    traces = []
    for i, (name, ys) in enumerate(curves.items()):
        color = colors[i] if i < len(colors) else PALETTE[i % len(PALETTE)]
        y = as_list(ys)
        traces.append(dict(type="scatter", x=list(range(len(y))), y=y, mode="lines+markers", name=name,
                           text=hover[:len(y)], marker=dict(size=4),
                           line=dict(color=color, dash="dash" if name in dashed else None),
                           hovertemplate="token %{text}: %{y:.4g}<extra>" + name + "</extra>"))
    return quick_figure(traces, title, "token position (hover: the token)", y_title, height=400,
                        **({"yaxis": LOG_AXIS} if log else {}), **marker(t))


def noise_curves(probe: dict, snr_db: float, title: str, first_label: str, second_label: str,
                 comparison_only: bool = False) -> go.Figure:
    """Monte-Carlo RMS vs SNR (raw and re-normalised query) against the exact raw bound and the series; each order of
    the series is drawn only where it is valid (`first_valid`, `second_valid`), as on the Query noise page.
    comparison_only: the family does not re-normalise q, so the q̂ curves are marked as a comparison."""
    x = probe["snr_db"]
    only = " (comparison only)" if comparison_only else ""
    lines = [("Monte Carlo, q = k + ε", "mc_raw", PALETTE[0], "solid", None),
             ("exact RMS σ‖S‖<sub>F</sub>/‖Sᵀk‖", "bound_raw", PALETTE[0], "dot", None),
             (f"Monte Carlo, re-normalised q̂{only}", "mc_renorm", PALETTE[1], "solid", None),
             (f"first order, q̂ ({first_label}){only}", "first_order", PALETTE[2], "dash", "first_valid"),
             (f"second order, q̂ ({second_label}){only}", "second_order", PALETTE[3], "dash", "second_valid")]
    if "retrieval_raw" in probe:
        lines.append(("vs w<sub>j</sub>: ‖Sᵀq − w<sub>j</sub>‖/‖w<sub>j</sub>‖ (exact RMS)", "retrieval_raw", "#000000",
                      "dashdot", None))
    traces = []
    for name, key, color, dash, valid in lines:
        y = as_list(probe[key])
        if valid is not None:  # a truncated series outside its validity is not a prediction: a gap, not a line
            y = [v if ok else None for v, ok in zip(y, probe[valid])]
        traces.append(dict(type="scatter", x=list(x), y=y, mode="lines", name=name, line=dict(color=color, dash=dash)))
    line = marker(snr_db)
    line["annotations"][0]["text"] = f"{snr_db:g} dB"
    # one label per decade: no bare "2"/"5" minor labels
    return quick_figure(traces, title, "SNR = ‖k‖²/(dk σ²) (dB)", "relative error (RMS, log)", height=420,
                        yaxis=LOG_AXIS, **line)
