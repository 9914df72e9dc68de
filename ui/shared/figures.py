"""Pure plotly figure builders: plain arrays in, go.Figure out (no streamlit, no torch, no analysis import).

Data are passed as Python lists (not numpy) so the figure JSON stays readable and easy to test.
Infinite values (e.g. a key the state cannot read back) become gaps: plotly cannot draw inf.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

PALETTE = qualitative.Plotly
RANDOM_COLOR = "#7f7f7f"


def as_list(x) -> list:
    """Floats with NaN/inf as None (a gap in the line)."""
    return [None if v is None or not math.isfinite(v) else float(v) for v in np.asarray(x, dtype=float).ravel()]


TITLE_CHARS = 44  # longest title line: fits a half-width (compare mode) chart beside the vertical toolbar
MAX_TEXT_CELLS = 64  # heatmaps print their values in the cells up to this many cells
# 1e-15, not SI prefixes (10f, 1p, 100µ) on singular values; one label per decade, never bare "2"/"5" minor labels
LOG_AXIS = dict(type="log", exponentformat="e", dtick=1)
MAX_TOKEN_TICKS = 40  # up to this many positions are labelled with their token on the x axis
LEGEND_ROW_PX = 22  # one legend entry per line below the plot: the figure grows by this much per entry
FEW_ENTRIES = 4     # up to this many entries fit in one horizontal row below the plot


def wrap_title(title: str, width: int = TITLE_CHARS) -> str:
    """Break a long title into lines of at most `width` characters (plotly never wraps, it cuts).

    Breaks go after ': ' and before ' (' first, so 'layer 1, head 0' and '(random init, seed 0)' stay whole
    when they fit; a piece still too long is broken between words.
    """
    if len(title) <= width:
        return title
    lines: list[str] = []
    for piece in title.replace(": ", ":\n").replace(" (", "\n(").split("\n"):
        if lines and len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
            continue
        line = ""
        for word in piece.split(" "):
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "<br>".join(lines)


def layout_dict(title: str, x_title: str, y_title: str, entries: int, **kwargs) -> dict:
    """Axis titles, a legend below, and a left-aligned title that wraps and pushes the margin down as needed (the
    toolbar stands vertically at the right edge, so it never covers the title); `entries`: named legend entries."""
    if entries > FEW_ENTRIES and "legend" not in kwargs:
        # many entries: one per line below the plot, and the figure grows so none is cut off or scrolled away
        kwargs["legend"] = dict(orientation="v", yanchor="top", y=-0.2, x=0)
        kwargs["height"] = max(kwargs.get("height") or 0, 400 + LEGEND_ROW_PX * entries)
    kwargs.setdefault("legend", dict(orientation="h", yanchor="top", y=-0.2, x=0))
    xaxis, yaxis = {**kwargs.pop("xaxis", {}), "title": dict(text=x_title)}, {**kwargs.pop("yaxis", {}),
                                                                            "title": dict(text=y_title)}
    return dict(title=dict(text=wrap_title(title), x=0, xref="paper", xanchor="left", yref="paper", y=1,
                           yanchor="bottom", pad=dict(b=12), automargin=True),
                xaxis=xaxis, yaxis=yaxis, margin=dict(l=60, r=40, t=50, b=50), modebar=dict(orientation="v"),
                **kwargs)


def axes_layout(fig: go.Figure, title: str, x_title: str, y_title: str, **kwargs) -> go.Figure:
    """The house layout (layout_dict) on an existing figure."""
    entries = sum(1 for t in fig.data if t.name and t.showlegend is not False)
    fig.update_layout(**layout_dict(title, x_title, y_title, entries, **kwargs))
    return fig


def quick_figure(traces: list[dict], title: str, x_title: str, y_title: str, **layout) -> go.Figure:
    """A figure from plain trace dicts in one construction, unvalidated: for charts redrawn on every step of a
    scrubber (plotly's per-property validation and updates cost tens of ms per figure; the State lab draws nine)."""
    entries = sum(1 for t in traces if t.get("name") and t.get("showlegend", True) is not False)
    return go.Figure(data=traces, layout=layout_dict(title, x_title, y_title, entries, **layout), _validate=False)


def key_dim_bars(head_k_dims: Sequence[int], tile_rows: int = 64) -> go.Figure:
    """dk per head for each layer, with dashed lines at the kernel's tile boundaries (multiples of tile_rows)."""
    layers = list(range(len(head_k_dims)))
    tiles = [-(-int(dk) // tile_rows) for dk in head_k_dims]
    fig = go.Figure(go.Bar(x=layers, y=[int(d) for d in head_k_dims], name="dk per head",
                           text=[f"{t} tile{'s' if t != 1 else ''}" for t in tiles], textposition="inside",
                           insidetextanchor="end",
                           hovertemplate="layer %{x}: dk = %{y} channels<extra></extra>"))
    top = max([int(d) for d in head_k_dims] + [tile_rows])
    for boundary in range(tile_rows, top + tile_rows, tile_rows):
        fig.add_hline(y=boundary, line_dash="dash", line_color=RANDOM_COLOR,
                      annotation_text=f"{boundary // tile_rows}×{tile_rows} rows", annotation_position="top left")
    fig.update_xaxes(dtick=1)
    return axes_layout(fig, f"Key dimension per head, by layer (tiles of {tile_rows} rows)", "layer",
                   "key dim dk per head (channels)")


def _fmt(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else "n/a"


def layer_head_heatmap(values, z_title: str, title: str, selected: tuple[int, int] | None = None,
                       zrange: tuple[float, float] | None = None, colorscale: str = "Viridis") -> go.Figure:
    """values [L, H] as a heatmap (layer 0 on top) plus invisible per-cell points that make cells clickable.

    zrange fixes the colour scale (a metric's full range, or one range shared by two heatmaps compared by
    colour). A difference map passes a diverging `colorscale` and a range symmetric about 0. Hovering
    anywhere in a cell shows its value; up to MAX_TEXT_CELLS cells also print it.
    """
    z = np.asarray(values, dtype=float)
    n_layers, n_heads = z.shape
    zmin, zmax = zrange if zrange is not None else (None, None)
    text = n_layers * n_heads <= MAX_TEXT_CELLS
    fig = go.Figure(go.Heatmap(z=[as_list(row) for row in z], x=list(range(n_heads)), y=list(range(n_layers)),
                               zmin=zmin, zmax=zmax, texttemplate="%{z:.3g}" if text else None,
                               colorscale=colorscale, colorbar=dict(title=dict(text=z_title, side="right")),
                               hovertemplate="layer %{y}, head %{x}: %{z:.4g} (click to inspect)<extra></extra>"))
    # Heatmap traces emit no selection events; transparent markers at the cell centres do (and show the value too).
    ll, hh = np.meshgrid(range(n_layers), range(n_heads), indexing="ij")
    fig.add_trace(go.Scatter(x=hh.ravel().tolist(), y=ll.ravel().tolist(), mode="markers", name="cells",
                             customdata=np.stack([ll.ravel(), hh.ravel()], 1).tolist(), showlegend=False,
                             text=[_fmt(v) for v in z.ravel()],
                             marker=dict(size=24, symbol="square", color="rgba(0,0,0,0)"),
                             hovertemplate="layer %{y}, head %{x}: %{text} (click to inspect)<extra></extra>"))
    if selected is not None:
        layer, head = selected
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color="white", width=3))
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(dtick=1, autorange="reversed")
    return axes_layout(fig, title, "head", "layer", clickmode="event+select", height=min(640, 180 + 60 * n_layers))


def _band(fig: go.Figure, x, mean, spread, name: str, color: str, dash: str = "solid",
          bounds: tuple[float | None, float | None] = (None, None)) -> None:
    """Mean line and a ±1 std band, the band clipped to the quantity's possible range (κ ≥ 1, a rank ≥ 0)."""
    x, mean, spread = list(x), np.asarray(mean, float), np.asarray(spread, float)
    lo, hi = (-np.inf if bounds[0] is None else bounds[0]), (np.inf if bounds[1] is None else bounds[1])
    upper, lower = as_list(np.clip(mean + spread, lo, hi)), as_list(np.clip(mean - spread, lo, hi))
    fig.add_trace(go.Scatter(x=x + x[::-1], y=upper + lower[::-1], fill="toself", fillcolor=color, opacity=0.2,
                             line=dict(width=0), hoverinfo="skip", name=f"{name} ± 1 std", showlegend=True))
    fig.add_trace(go.Scatter(x=x, y=as_list(mean), mode="lines", name=f"{name} (mean)",
                             line=dict(color=color, dash=dash)))


def metric_over_positions(positions, mean, spread, y_title: str, title: str,
                          random: tuple | None = None, bounds: tuple = (None, None),
                          name: str = "trained", tokens: Sequence[str] | None = None) -> go.Figure:
    """Mean ± spread across sequences of a metric over token position; `random` = (mean, spread) overlay.

    bounds: the metric's possible range (None: open); the std bands are clipped to it. name: the loaded
    model's line ("trained", or "loaded weights" when they may be random too). tokens: the text of the token
    at each position (hover, and the tick labels when there are few), so a reader can name the word."""
    fig = go.Figure()
    _band(fig, positions, mean, spread, name, PALETTE[0], bounds=bounds)
    if random is not None:
        _band(fig, positions, random[0], random[1], "random init", RANDOM_COLOR, dash="dash", bounds=bounds)
    if tokens is not None:
        shown = [repr(t)[1:-1] if t.strip() else repr(t) for t in tokens]  # "\n" and spaces stay visible
        for trace in fig.data:
            if trace.mode == "lines":
                trace.update(text=shown, hovertemplate="token %{x} “%{text}”: %{y:.4g}")
        if len(positions) <= MAX_TOKEN_TICKS:
            fig.update_xaxes(tickvals=list(positions), ticktext=[f"{p} {t}" for p, t in zip(positions, shown)],
                             tickangle=-60)
    return axes_layout(fig, title, "token position t (state after token t)", y_title)


def singular_spectrum(curves: dict[str, Sequence[float]], title: str,
                      random_curves: dict[str, Sequence[float]] | None = None) -> go.Figure:
    """Singular values s_i (log y) against their index i, one line per position label."""
    fig = go.Figure()
    for n, (name, s) in enumerate(curves.items()):
        s = as_list(s)
        fig.add_trace(go.Scatter(x=list(range(1, len(s) + 1)), y=s, mode="lines+markers", name=name,
                                 line=dict(color=PALETTE[n % len(PALETTE)]), marker=dict(size=4)))
    for n, (name, s) in enumerate((random_curves or {}).items()):
        s = as_list(s)
        fig.add_trace(go.Scatter(x=list(range(1, len(s) + 1)), y=s, mode="lines", name=f"{name} (random init)",
                                 line=dict(color=PALETTE[n % len(PALETTE)], dash="dot")))
    fig.update_yaxes(**LOG_AXIS)
    return axes_layout(fig, title, "singular value index i (1 = largest)", "singular value s_i (state units, log)")


def _valid_only(values, valid) -> list:
    """A prediction drawn only where it is valid: a gap elsewhere (never shown outside its range)."""
    return [v if ok else None for v, ok in zip(as_list(values), valid)]


def _valid_label(start) -> str:
    return "valid nowhere in range" if start is None else f"valid ≥ {start:.1f} dB"


def _iqr_bars(summary: dict) -> dict:
    """error_y of a median with its interquartile range (asymmetric bars)."""
    med, lo, hi = (np.asarray(as_list(summary[k]), dtype=float) for k in ("median", "q25", "q75"))
    return dict(type="data", symmetric=False, array=as_list(hi - med), arrayminus=as_list(med - lo), thickness=1)


def retrieval_error_vs_snr(snr_db: Sequence[float], probes: list[dict], title: str,
                           comparison_only: bool = False) -> go.Figure:
    """Analytic predictions (lines) and, once run, Monte Carlo (markers, IQR bars) per probe, one plot.

    probes: summaries from analysis.inspect.noise_report.summarize_probe (median/q25/q75 over sequences). The raw-query
    prediction is exact; the re-normalised first and second orders are drawn only inside their validity
    range (the legend says where), so no figure appears where its approximation does not hold.
    comparison_only: the model reads its state with the raw query; the re-normalised curves say so in the legend.
    """
    extra = " (comparison only)" if comparison_only else ""
    fig = go.Figure()
    x = [float(s) for s in snr_db]
    for n, probe in enumerate(probes):
        color, name = PALETTE[n % len(PALETTE)], probe["name"]
        lines = (("predicted_raw", "raw query: exact", "solid", None),
                 ("second_order", "re-normalised: 2nd order", "dot", "second_order"),
                 ("first_order", "re-normalised: 1st order", "dashdot", "first_order"))
        for key, label, dash, order in lines:
            y = as_list(probe[key]["median"])
            if order is not None:
                y = _valid_only(y, probe[f"{order}_valid"])
                label = f"{label} ({_valid_label(probe[f'{order}_valid_from_snr_db'])}){extra}"
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", legendgroup=name, name=f"{name}, {label}",
                                     line=dict(color=color, dash=dash, width=1 if order == "first_order" else 2)))
        for key, label, symbol in (("mc_raw_rms", "raw query", "circle"), ("mc_rms", "re-normalised", "diamond-open")):
            if key in probe:
                fig.add_trace(go.Scatter(x=x, y=as_list(probe[key]["median"]), mode="markers", legendgroup=name,
                                         name=f"{name}, {label}: Monte Carlo{extra if key == 'mc_rms' else ''}",
                                         error_y=_iqr_bars(probe[key]),
                                         marker=dict(color=color, symbol=symbol, size=8)))
    fig.update_yaxes(**LOG_AXIS)
    return axes_layout(fig, title, "SNR = ‖k‖² / (dk σ²) (dB)",
                   "relative retrieval error ‖Sᵀ(q−k)‖/‖Sᵀk‖ (RMS; median over sequences)")


def recall_accuracy_vs_snr(snr_db: Sequence[float], accuracy: Sequence[float], clean: float, title: str,
                           chance: float | None = None) -> go.Figure:
    """Recall accuracy with noisy queries against SNR, with the clean accuracy (and chance) as reference lines."""
    fig = go.Figure(go.Scatter(x=[float(s) for s in snr_db], y=as_list(accuracy), mode="lines+markers",
                               name="noisy queries", hovertemplate="%{x} dB: %{y:.3f}<extra></extra>"))
    fig.add_hline(y=float(clean), line_dash="dash", line_color=PALETTE[2], annotation_text=f"clean {clean:.3f}")
    if chance is not None:
        fig.add_hline(y=float(chance), line_dash="dot", line_color=RANDOM_COLOR,
                      annotation_text=f"chance {chance:.3f}")
    fig.update_yaxes(range=[0, 1.05])
    return axes_layout(fig, title, "query SNR = ‖q‖² / (dk σ²) (dB)", "recall accuracy (fraction of queried values)")
