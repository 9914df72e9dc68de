"""Pure plotly builder for the layer-sensitivity map: layers × ratios heatmap with the loss in each cell.

Cell labels have a fixed font size (CELL_FONT_PX): plotly otherwise shrinks them to fit the cell, which made
"+0.00123 ± 0.0011" unreadable (~6 px). The compact map's cell says the loss; its standard error and the perplexity change
are in the hover (the full map prints the SE in the cell too). Rows carry the names the ratio inputs use ("layer 3 (block 4)" in a hybrid).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from analysis.shrink.number_format import signed, signed_percent
from ui.shared.figures import axes_layout

CELL_FONT_PX = 12    # ≥ 11 px: legible beside the inputs
ROW_PX = 34          # one map row; the compact map lines its rows up with nothing but keeps this height


def cell_text(loss: float | None, se: float | None = None) -> str:
    """The number the colour shows (blank = not yet) with its paired standard error when it was measured; never
    "-0.0000" (analysis.shrink.number_format)."""
    if loss is None:
        return ""
    return signed(loss) + ("" if se is None else f" ± {se:.2g}")


def hover_text(loss: float | None, se: float | None, metric: str) -> str:
    if loss is None:
        return "not measured yet"
    text = signed(loss) + ("" if se is None else f" ± {se:.4f} (paired SE)")
    if metric == "ppl":
        text += f" nats/token, perplexity {signed_percent(math.expm1(loss))}"
    return text


def sensitivity_heatmap(ratios: Sequence[float], losses: Sequence[Sequence[float | None]],
                        values: Sequence[Sequence[float | None]], dims: Sequence[Sequence[int | None]],
                        loss_label: str, value_label: str, title: str,
                        ses: Sequence[Sequence[float | None]] | None = None,
                        row_names: Sequence[str] | None = None, metric: str = "ppl",
                        marked: Sequence[int | None] | None = None, compact: bool = False,
                        raw: Sequence[Sequence[float | None]] | None = None,
                        raw_ses: Sequence[Sequence[float | None]] | None = None) -> go.Figure:
    """Rows = layers (named `row_names`, default "layer i"), columns = ratios; colour and text = the fitted map's
    loss (analysis.shrink.fitted_map, ± its standard error: what the prediction and the allocator read); the hover
    adds the cell as measured (`raw` ± `raw_ses`: paired SE, perplexity change) and the measured value. marked: per
    row, the column of the ratio typed in the inputs (outlined), or None. compact: the small map beside the inputs."""
    ses = ses or [[None] * len(row) for row in losses]
    raw = raw or losses
    raw_ses = raw_ses or ses
    names = list(row_names) if row_names is not None else [f"layer {i}" for i in range(len(losses))]
    text = [[cell_text(x, None if compact else e) for x, e in zip(row, erow)] for row, erow in zip(losses, ses)]
    custom = [[[("–" if d is None else d), ("–" if v is None else f"{v:.4g}"), hover_text(m, e, metric)]
               for d, v, m, e in zip(drow, vrow, mrow, erow)]
              for drow, vrow, mrow, erow in zip(dims, values, raw, raw_ses)]
    fig = go.Figure(go.Heatmap(
        z=[[None if x is None else x for x in row] for row in losses], x=[f"ρ {r:g}" for r in ratios],
        y=names, text=text, texttemplate="%{text}", textfont=dict(size=CELL_FONT_PX), customdata=custom,
        colorscale="Reds", zmin=0, colorbar=None if compact else dict(title=dict(text=loss_label, side="right")),
        showscale=not compact, xgap=2, ygap=2,
        hovertemplate=f"%{{y}} alone at %{{x}} (dk' %{{customdata[0]}}): fitted {loss_label} %{{z:+.4f}}; measured "
                      f"%{{customdata[2]}} ({value_label} %{{customdata[1]}})<extra></extra>"))
    for row, col in enumerate(marked or []):
        if col is not None:  # the typed ratio of this layer, when it is one of the map's columns
            fig.add_shape(type="rect", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5, y1=row + 0.5,
                          line=dict(color="#1f77b4", width=3))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=CELL_FONT_PX))
    fig.update_xaxes(tickfont=dict(size=CELL_FONT_PX))
    height = 90 + ROW_PX * len(names) if compact else max(320, 140 + 44 * len(names))
    if compact:
        fig.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=30), title=dict(text=title, x=0, font=dict(size=13)))
        return fig
    return axes_layout(fig, title, "pruning ratio of that one layer (all others intact)", "layer", height=height)
