"""The States & rank views of a side-by-side (original | pruned): the difference map and the drill-in's two
columns (metric over positions, singular spectrum) for one layer and head of both models."""
from __future__ import annotations

import numpy as np
import streamlit as st

from analysis.linalg.rank import METRIC_INFO
from analysis.linalg.rank_card import HEADLINE, HEADLINE_NAME
from ui.shared import figures, scales
from ui.shared.context import Context
from ui.shared.labels import caption, metric_title
from ui.shared.reduce import mean_std
from ui.shared.sides import Side
from ui.compare.compare import provenance, traced_side_every_token


def difference_map(ctx: Context, sides: tuple[Side, Side], data: dict, data_other: dict,
                   selected: tuple[int, int]) -> None:
    """Δ of the headline (effective rank, in directions: comparison − original) of the final states on a diverging
    scale centred on 0, whatever metric the maps show: a ratio such as the rank utilization divides by
    min(dk′, dv), which pruning changes, so its Δ would mix the two models' denominators."""
    final = mean_std(data["metrics"][HEADLINE][..., -1], axis=1)[0]
    final_other = mean_std(data_other["metrics"][HEADLINE][..., -1], axis=1)[0]
    diff = final_other - final
    finite = np.abs(diff[np.isfinite(diff)])
    bound = float(finite.max()) if finite.size else 0.0
    title = f"Δ {HEADLINE_NAME} (directions used): {sides[1].role} − original"
    st.plotly_chart(figures.layer_head_heatmap(diff, f"Δ {metric_title(HEADLINE)}", title, selected,
                                               (-bound, bound) if bound else None, colorscale="RdBu"),
                    key="rank_heatmap_delta")
    st.caption(caption(provenance(ctx, sides[0], data),
                       f"beside {sides[1].name} ({sides[1].dims}) on the same token ids; Δ of the means over "
                       f"{data['sequences']} sequences, in directions (the {HEADLINE_NAME}, the table's Δ column), "
                       "whichever metric the maps above show; red: the compared model uses fewer directions"))


def layer_label(sides: tuple[Side, Side] | tuple) -> callable:
    """Layer picker labels: the key dims of both models when they differ in that layer."""
    if not sides:
        return str
    a, b = (s.info.head_k_dims for s in sides)
    return lambda layer: str(layer) if a[layer] == b[layer] else f"{layer} (dk {a[layer]} → dk′ {b[layer]})"


def drill_in(ctx: Context, sides: tuple[Side, Side], traces: tuple[dict, dict], metric: str, layer: int, head: int,
             chosen: list[int], every_token: bool, stride: int) -> None:
    """Two columns, original | pruned: the metric over token positions, then the singular spectrum."""
    positions = traces[0]["positions"]
    index = [positions.index(p) for p in chosen]
    label = f"{METRIC_INFO[metric].label}{scales.tau_note(metric)}"
    for side, data, col in zip(sides, traces, st.columns(2)):
        where = f"layer {layer}, head {head} ({side.role}, dk {side.info.head_k_dims[layer]})"
        prov, n_seq = provenance(ctx, side, data), data["sequences"]
        with col:
            if every_token:
                traced = traced_side_every_token(ctx, side)
                values = traced["rank_utilization"]                                  # [L, B, H, T]
                xs, how = list(range(values.shape[-1])), f"after every token ({traced['how']})"
            else:
                values, xs, how = data["metrics"][metric], positions, f"every {stride} tokens"
            mean, std = mean_std(values[layer, :, head, :], axis=0)
            st.plotly_chart(figures.metric_over_positions(xs, mean, std, metric_title(metric), f"{label}: {where}",
                                                          name=side.role),
                            key=f"rank_over_positions_{'original' if not side.id else 'other'}")
            st.caption(caption(prov, f"{how}, mean ± std over {n_seq} sequences"))
            spectra = {f"after token {positions[i]}": data["singular_values"][layer][:, head, i].mean(0) for i in index}
            st.plotly_chart(figures.singular_spectrum(spectra, f"Singular spectrum: {where}"),
                            key=f"spectrum_{'original' if not side.id else 'other'}")
            st.caption(caption(prov, f"singular values averaged over {n_seq} sequences"))
