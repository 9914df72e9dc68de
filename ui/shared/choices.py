"""A multiselect that can be emptied, with "only" and "all" shortcuts, for a remembered choice (see ui.shared.state).

Picking one strategy out of six takes one click on its "only" pill instead of five chip removals; "All"
brings every option back. An empty selection stays empty (the page says what to pick) instead of
silently refilling itself.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from ui.shared import state

ONLY_PREFIX = "only:"
PILLS_MAX = 8  # more options than this get a select for "only", not a row of pills


def _only(name: str) -> None:
    """Callback of the "only" pills: select just the clicked option, then clear the pills (a one-shot)."""
    picked = st.session_state.get(ONLY_PREFIX + name)
    if picked is not None:
        state.choose(name, [picked])
        st.session_state[ONLY_PREFIX + name] = None


def _all(name: str, options: list) -> None:
    state.choose(name, list(options))


def snap_to(chosen: Sequence[int], options: Sequence[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """Each chosen number moved to the nearest option (ties: the lower), duplicates dropped, order kept; plus
    the (old, new) pairs that moved. Token positions survive a new stride or a shorter text this way instead
    of being dropped (or the choice falling back to the defaults) without a word."""
    options = sorted(options)
    snapped, moved = [], []
    for p in chosen:
        if not options:
            break
        near = min(options, key=lambda o: (abs(o - p), o))
        if near != p:
            moved.append((p, near))
        if near not in snapped:
            snapped.append(near)
    return snapped, moved


def multi_choice(label: str, options: Sequence, name: str, default: list, *,
                 format_func: Callable = str, help: str | None = None,
                 empty_hint: str = "Nothing picked: choose at least one option above.") -> list:
    """Draw the multiselect for remembered choice `name` with its shortcuts; return the (possibly empty) selection.

    Call it inside the column or container it should fill. Up to PILLS_MAX options the "only" shortcut is
    a row of pills (one click); beyond that, a compact select ("Only…").
    """
    options = list(options)
    chosen = state.field(st.multiselect, label, name, default, options=options, format_func=format_func, help=help)
    if len(options) > 1:
        only, everything = st.columns([6, 1], vertical_alignment="bottom")
        shortcut = dict(format_func=format_func, key=ONLY_PREFIX + name, on_change=_only, args=(name,))
        if len(options) <= PILLS_MAX:
            only.pills("Only this one", options, **shortcut)
        else:
            only.selectbox("Only this one", options, index=None, placeholder="Only…", **shortcut)
        everything.button("All", key=f"all:{name}", on_click=_all, args=(name, options),
                          disabled=len(chosen) == len(options), help=f"Select all {len(options)} options.")
    if not chosen:
        st.caption(empty_hint)
    return chosen
