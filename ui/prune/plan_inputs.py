"""The per-layer ratio inputs of the Prune page, remembered per model (ui.shared.state scope = the model's path):
the Suggest, Allocate and Verify buttons fill them; a model never shows another model's plan."""
from __future__ import annotations

import streamlit as st

from ui.shared import state
from ui.shared.keys import ModelKey


def name(layer: int) -> str:
    return f"layer_ratio_{layer}"


def scope(key: ModelKey) -> str:
    return key.path


def fill(ratios, key: ModelKey) -> None:
    """Put a plan into the inputs (from a button callback, before the page draws them)."""
    for layer, rho in enumerate(ratios):
        state.choose(name(layer), round(rho, 4), scope(key))


def held(n_layers: int, key: ModelKey) -> list:
    return [state.get(name(i), scope=scope(key)) for i in range(n_layers)]


MODE, PER_LAYER = "prune_mode", "Per layer"  # the Prune page's Uniform / Per layer radio (ui.prune.prune_form)
PENDING = "plan_inputs_pending"  # (scope, ratios) a job chose: applied before the inputs are drawn next


def offer(ratios, key: ModelKey) -> None:
    """From a script run after the inputs were drawn (a job's result): fill them on the next run."""
    st.session_state[PENDING] = (scope(key), list(ratios))


def apply_pending(key: ModelKey) -> None:
    """Call before drawing the inputs: a plan offered for this model goes into them (shown: per-layer mode)."""
    pending = st.session_state.get(PENDING)
    if pending and pending[0] == scope(key):
        fill(st.session_state.pop(PENDING)[1], key)
        state.choose(MODE, PER_LAYER)


def restore(ratios, strategy: str, key: ModelKey) -> None:
    """A plan chosen on the history chart (from its click callback): its strategy, exact key dims (no rounding)
    and ratios into the inputs, in per-layer mode."""
    fill(ratios, key)
    state.choose("prune_kind", "channels")  # ui.prune.prune_form's Plan radio: key channels only
    state.choose(MODE, PER_LAYER)
    state.choose("prune_strategy", strategy)
    state.choose("prune_round", 0)
