"""Per-layer pruning ratios edited beside each layer's rank utilization, with a "Suggest from rank" button."""
from __future__ import annotations

import math

import streamlit as st

from analysis.errors import AnalysisError
from analysis.shrink.suggest import suggest
from ui.shared import shrink, state
from ui.shared.blocks import layer_name
from ui.shared.context import Context
from ui.prune import plan_inputs

ERROR_KEY = "suggest_error"
NOTE_KEY = "suggest_note"  # (note, unrounded ratios) when tile rounding changed the last suggestion


def _suggest(profile: list[float], round_to: int | None, dims: list[int], key) -> None:
    """Button callback: fill the ratio inputs (callbacks run before the page draws its widgets)."""
    try:
        target = float(st.session_state["w:suggest_target"])
        suggestion = suggest(profile, target, round_to=round_to, key_dims=dims)
        plan_inputs.fill(suggestion.ratios, key)
        st.session_state.pop(ERROR_KEY, None)
        note = suggestion.note()
        st.session_state[NOTE_KEY] = (note, suggestion.unrounded, suggestion.ratios) if note else None
    except AnalysisError as exc:
        st.session_state[ERROR_KEY] = str(exc)


def per_layer_ratios(ctx: Context, round_to: int | None, calib: shrink.CalibrationSettings):
    """One row per layer: its rank utilization (the one rank profile, ui.shared.shrink.rank_profile) as a bar next to
    its ratio input; returns (the ratios, the empty column beside the inputs that the page fills with the compact
    sensitivity map once the map section has run: ui.prune.sensitivity_view.compact)."""
    dims = ctx.info.head_k_dims
    profile = [math.nan if r["rank_utilization"] is None else r["rank_utilization"]
               for r in shrink.rank_profile(ctx, calib)]
    t1, t2, t3 = st.columns([1, 1, 1], vertical_alignment="bottom")
    state.field(t1.number_input, "Target mean ratio", "suggest_target", 0.5, 0.0, 0.9, step=0.05)
    t2.button("Suggest from rank", on_click=_suggest, args=(profile, round_to, dims, ctx.key), key="suggest",
              help="Keep a fraction of each layer's channels proportional to its rank utilization, averaging "
                   "(weighted by dk) to the target; tile-aware when rounding is on.")
    from ui.prune.sensitivity_view import allocate_into_inputs
    t3.button("Allocate from sensitivity", on_click=allocate_into_inputs, args=(ctx.key, round_to), key="allocate",
              help="Least predicted loss from the Layer sensitivity map below, at the state bytes of the uniform "
                   "plan at the target mean ratio (exact knapsack over the measured, tile-rounded dims).")
    if state.get(ERROR_KEY):
        st.error(state.get(ERROR_KEY))
    shown = state.get(NOTE_KEY)
    if shown and len(shown[2]) == len(dims) and (  # only while the inputs still hold that suggestion
            plan_inputs.held(len(dims), ctx.key) == [round(r, 4) for r in shown[2]]):
        note, unrounded, rounded = shown
        st.warning(note)
        st.table({"layer": list(range(len(dims))), "suggested ρ (rounded, in the inputs)": [f"{r:.3f}" for r in rounded],
                  "unrounded ρ (rank profile alone)": [f"{r:.3f}" for r in unrounded]})
    ratios = []
    inputs, beside = st.columns([3, 2])
    for layer, (dk, u) in enumerate(zip(dims, profile)):
        a, b, c = inputs.columns([2, 3, 2], vertical_alignment="center")
        a.markdown(f"**{layer_name(ctx.info, layer)}** · dk {dk}")
        finite = math.isfinite(u)
        b.progress(min(1.0, max(0.0, u)) if finite else 0.0,
                   text=f"rank utilization u = {u:.3f}" if finite else "rank utilization: not finite")
        ratios.append(float(state.field(c.number_input, f"ratio ρ, {layer_name(ctx.info, layer)}", plan_inputs.name(layer), 0.5,
                                        0.0, 0.99, step=0.05, format="%.3f", scope=plan_inputs.scope(ctx.key))))
    inputs.caption(f"u: {shrink.profile_caption(ctx, calib)} (the calibration above; the sensitivity map and "
                   "*Verify and choose* use the same profile).")
    return ratios, beside.empty()
