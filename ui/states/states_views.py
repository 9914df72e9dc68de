"""The States & rank page's views: the final-state maps (one model, beside its random-init copy or a compared
model), a heatmap click choosing the drill-in's head, the spectrum position picker that follows a new stride,
and one model's drill-in (metric over positions | spectrum). The side-by-side drill-in and difference map live
in ui/compare/compare_views.py."""
from __future__ import annotations

import streamlit as st

from analysis.linalg.rank import METRIC_INFO
from analysis.linalg.rank_card import HEADLINE
from ui.shared import figures, notice, rank_card_view, scales, state
from ui.shared.choices import multi_choice, snap_to
from ui.shared.context import Context, traced_every_token
from ui.shared.labels import Provenance, caption, metric_title, weights_name
from ui.shared.reduce import mean_std
from ui.shared.sides import Side

HEATMAP_KEY = "rank_heatmap"  # the clickable map's chart key: its selection is read on the next run


def final_maps(ctx: Context, sides: tuple[Side, Side] | tuple, traces: tuple[dict, dict | None, dict | None],
               provs: tuple[Provenance, Provenance | None], finals: tuple, metric: str, selected: tuple[int, int],
               zrange: tuple[float, float] | None, max_rank: int) -> None:
    """The metric of the final state by layer and head (clickable), with the random-init copy's map or the
    compared model's beside it on the same colour range. `finals`: the [L, H] means (original, random, other)."""
    (data, rand, data_other), (prov, prov_other), (final, final_rand, final_other) = traces, provs, finals
    other = sides[1] if sides else None
    title = f"{METRIC_INFO[metric].label} of the final state, by layer and head{scales.tau_note(metric)}"
    z_title, n_seq = metric_title(metric), data["sequences"]
    cols = st.columns(2) if rand or other else [st.container()]
    with cols[0]:
        suffix = f" ({weights_name(ctx.key.path)})" if rand else f" ({sides[0].title})" if other else ""
        st.plotly_chart(figures.layer_head_heatmap(final, z_title, title + suffix, selected, zrange),
                        key=HEATMAP_KEY, on_select="rerun", selection_mode="points")
        st.caption(caption(prov, f"state after token {data['tokens'] - 1}, mean over {n_seq} sequences"))
        headline = mean_std(data["metrics"][HEADLINE][..., -1], axis=1)[0]  # the count of directions used, [L, H]
        st.caption(notice.rank_map(metric, METRIC_INFO[metric].label, final, max_rank, final_rand, headline))
    if rand:
        with cols[1]:
            st.plotly_chart(figures.layer_head_heatmap(final_rand, z_title, title + " (random init, seed 0)",
                                                       selected, zrange), key="rank_heatmap_random")
            st.caption(caption(prov, "random-init weights (seed 0), same config and inputs"))
    if other:
        with cols[1]:
            st.plotly_chart(figures.layer_head_heatmap(final_other, z_title, f"{title} ({other.title})", selected,
                                                       zrange), key="rank_heatmap_compare")
            st.caption(caption(prov_other, f"state after token {data_other['tokens'] - 1}, mean over {n_seq} "
                                           "sequences, same token ids as the original"))


def clicked_cell(n_layers: int, n_heads: int) -> tuple[int, int]:
    """The (layer, head) to drill into: a new click on the heatmap selects its cell, once per click."""
    click = st.session_state.get(HEATMAP_KEY)
    points = ((click or {}).get("selection") or {}).get("points") or []
    if not points:
        st.session_state["last_click"] = None  # a later click on the same cell is a new click
    else:
        cell = (int(round(points[0]["y"])), int(round(points[0]["x"])))
        if cell != state.get("last_click") and 0 <= cell[0] < n_layers and 0 <= cell[1] < n_heads:
            state.choose("sel_layer", cell[0])
            state.choose("sel_head", cell[1])
            st.session_state["last_click"] = cell
    return min(int(state.get("sel_layer", 0)), n_layers - 1), min(int(state.get("sel_head", 0)), n_heads - 1)


def spectrum_positions(positions: list[int], stride: int) -> list[int]:
    """The picked spectrum positions; after a new stride or text each moves to the nearest collected one, said once."""
    default = sorted({positions[min(1, len(positions) - 1)], positions[len(positions) // 2], positions[-1]})
    previous = state.get("spectrum_positions")
    if previous:
        snapped, moved = snap_to(previous, positions)
        if moved:
            state.choose("spectrum_positions", snapped)
            st.caption("Spectrum positions moved to the nearest collected token position (every "
                       f"{stride} tokens, last {positions[-1]}): " + ", ".join(f"{a} → {b}" for a, b in moved) + ".")
    return multi_choice("Spectrum at token positions", positions, "spectrum_positions", default,
                        empty_hint="No position picked: choose at least one to draw its singular spectrum.")


def drill_in(ctx: Context, traces: tuple[dict, dict | None], prov: Provenance, metric: str, layer: int, head: int,
             chosen: list[int], every_token: bool, stride: int) -> None:
    """One model (and its random-init copy when `traces[1]` is given): the metric over token positions, then
    the singular spectrum at the chosen positions."""
    data, rand = traces
    positions, n_seq = data["positions"], data["sequences"]
    left, right = st.columns(2)
    with left:
        if every_token:
            traced = traced_every_token(ctx)
            dense = traced["rank_utilization"]                                  # [L, B, H, T]
            dense_rand = traced_every_token(ctx, random_init=True)["rank_utilization"] if rand else None
            xs, values = list(range(dense.shape[-1])), dense
            overlay = mean_std(dense_rand[layer, :, head, :], axis=0) if rand else None
            how = f"after every token ({traced['how']})"
        else:
            xs, values = positions, data["metrics"][metric]
            overlay = mean_std(rand["metrics"][metric][layer, :, head, :], axis=0) if rand else None
            how = f"every {stride} tokens"
        mean, std = mean_std(values[layer, :, head, :], axis=0)
        # the token at each position (the first sequence's when there are several) for the hover and short-text ticks
        tokens = [data["token_text"][0][p] for p in xs] if data.get("token_text") else None
        title = f"{METRIC_INFO[metric].label}{scales.tau_note(metric)}: layer {layer}, head {head}"
        bounds = scales.band_bounds(metric if not every_token else "rank_utilization")
        st.plotly_chart(figures.metric_over_positions(xs, mean, std, metric_title(metric), title, overlay, bounds,
                                                      weights_name(ctx.key.path), tokens),
                        key="rank_over_positions")
        st.caption(caption(prov, f"{how}, mean ± std over {n_seq} sequences"
                                 + ("; the hover names sequence 0's token" if n_seq > 1 and tokens else "")))
        st.caption(notice.over_positions(xs, mean, tokens))
    with right:
        index = [positions.index(p) for p in chosen]
        spectra = lambda d: {f"after token {positions[i]}": d["singular_values"][layer][:, head, i].mean(0)  # noqa: E731
                             for i in index}
        if not index:  # a sentence (the picker's hint says what to do), not blank axes
            st.info("No spectrum: no token position is picked above.")
        else:
            st.plotly_chart(figures.singular_spectrum(spectra(data), f"Singular spectrum: layer {layer}, head {head}",
                                                      spectra(rand) if rand else None), key="spectrum")
            st.caption(caption(prov, f"singular values averaged over {n_seq} sequences"))
            st.caption(notice.spectrum(spectra(data), float(data["metrics"][HEADLINE][layer, :, head, index[-1]].mean())))


def rank_cards(sides, traces: tuple, provs: tuple, layer: int, head: int) -> None:
    """The rank card of the drilled-in head's final state, for each model shown (one, or original | compared)."""
    names = [s.role for s in sides] if sides else [None]
    for col, name, data, prov in zip(st.columns(len(names)), names, traces, provs):
        with col:
            where = f"layer {layer}, head {head}" + (f" ({name})" if name else "")
            rank_card_view.show(f"{where}, state after token {data['tokens'] - 1}",
                                data["singular_values"][layer][:, head, -1], scales.TAU,
                                caption(prov, f"mean over {data['sequences']} sequences"),
                                key=f"rank_card_{name or 'model'}")
