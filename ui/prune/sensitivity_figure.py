"""Pure plotly builder for the layer-sensitivity map: layers × ratios heatmap with the loss in each cell."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ui.shared.figures import axes_layout


def cell_text(loss: float | None, se: float | None) -> str:
    """The number the colour shows (blank = not yet), with its paired standard error when it was measured."""
    if loss is None:
        return ""
    return f"{loss:+.3g}" + ("" if se is None else f" ± {se:.2g}")


def sensitivity_heatmap(ratios: Sequence[float], losses: Sequence[Sequence[float | None]],
                        values: Sequence[Sequence[float | None]], dims: Sequence[Sequence[int | None]],
                        loss_label: str, value_label: str, title: str,
                        ses: Sequence[Sequence[float | None]] | None = None,
                        raw: Sequence[Sequence[float | None]] | None = None,
                        raw_ses: Sequence[Sequence[float | None]] | None = None) -> go.Figure:
    """Rows = layers, columns = ratios; colour and text = the fitted map's loss (analysis.shrink.fitted_map, ± its
    standard error: what the prediction and the allocator read); the hover adds the cell as measured (`raw` ±
    `raw_ses`) and the measured value (perplexity or accuracy)."""
    ses = ses or [[None] * len(row) for row in losses]
    raw = raw or losses
    raw_ses = raw_ses or ses
    text = [[cell_text(x, e) for x, e in zip(row, erow)] for row, erow in zip(losses, ses)]
    custom = [[[("–" if d is None else d), ("–" if v is None else f"{v:.4g}"), cell_text(m, e) or "–"]
               for d, v, m, e in zip(drow, vrow, mrow, erow)]
              for drow, vrow, mrow, erow in zip(dims, values, raw, raw_ses)]
    fig = go.Figure(go.Heatmap(
        z=[[None if x is None else x for x in row] for row in losses], x=[f"ρ = {r:g}" for r in ratios],
        y=[f"layer {i}" for i in range(len(losses))], text=text, texttemplate="%{text}", customdata=custom,
        colorscale="Reds", zmin=0, colorbar=dict(title=dict(text=loss_label, side="right")), xgap=2, ygap=2,
        hovertemplate=f"%{{y}} alone at %{{x}} (dk' %{{customdata[0]}}): fitted {loss_label} %{{text}}; measured "
                      f"%{{customdata[2]}} ({value_label} %{{customdata[1]}})<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return axes_layout(fig, title, "pruning ratio of that one layer (all others intact)", "layer")
