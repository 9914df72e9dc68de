"""Session-state helpers: choices that survive page switches, and widgets that remember them.

Streamlit drops the widget keys of a page that is not rendered, so a choice that should outlive a
page switch lives under a plain key (`name`) and its widget uses its own key (`w:name`), re-seeded
from the plain key on every run. Widgets drawn this way get no `value=`/`index=` argument.
"""
from __future__ import annotations

from collections.abc import Sequence

import streamlit as st


def remembered(name: str, default, options: Sequence | None = None) -> str:
    """Widget key for choice `name`, seeded from the remembered value; invalid values fall back to `default`."""
    wkey = f"w:{name}"
    value = st.session_state.get(wkey, st.session_state.get(name, default))
    if options is not None:
        options = list(options)
        if isinstance(default, list):  # multiselect: keep the valid entries; one the user emptied stays empty
            kept = [v for v in value if v in options]
            value = kept if kept or not value else [v for v in default if v in options]
        elif value not in options:
            value = default if default in options else (options[0] if options else None)
    st.session_state[wkey] = value
    st.session_state[name] = value
    return wkey


def remember(name: str):
    """Copy the widget's value to the plain key and return it (call right after drawing the widget)."""
    st.session_state[name] = st.session_state[f"w:{name}"]
    return st.session_state[name]


def choose(name: str, value) -> None:
    """Set a remembered choice from code (e.g. a chart click) before its widget is drawn."""
    st.session_state[name] = value
    st.session_state[f"w:{name}"] = value


def get(name: str, default=None):
    return st.session_state.get(name, default)
