"""Session-state helpers: choices that survive page switches, and widgets that remember them.

Streamlit drops the widget keys of a page that is not rendered, so a choice that should outlive a
page switch lives under a plain key (`name`) and its widget uses its own key (`w:name`), re-seeded
from the plain key on every run. Widgets drawn this way get no `value=`/`index=` argument.

A choice that depends on the model (a per-layer ratio) takes `scope=` (the model's identity): its plain
key is `name@scope`, so another model never inherits it, and coming back to a model finds its own value.
The widget key stays `w:name` (tests and callbacks address it); it is re-seeded when the scope changes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st


def _plain(name: str, scope: str | None) -> str:
    return name if scope is None else f"{name}@{scope}"


def remembered(name: str, default, options: Sequence | None = None, scope: str | None = None) -> str:
    """Widget key for choice `name`, seeded from the remembered value; invalid values fall back to `default`."""
    wkey, plain = f"w:{name}", _plain(name, scope)
    if scope is not None and st.session_state.get(f"{wkey}#scope") != scope:  # another model: not its value
        st.session_state.pop(wkey, None)
        st.session_state[f"{wkey}#scope"] = scope
    value = st.session_state.get(wkey, st.session_state.get(plain, default))
    if options is not None:
        options = list(options)
        if isinstance(default, list):  # multiselect: keep the valid entries; one the user emptied stays empty
            kept = [v for v in value if v in options]
            value = kept if kept or not value else [v for v in default if v in options]
        elif value not in options:
            value = default if default in options else (options[0] if options else None)
    st.session_state[wkey] = value
    st.session_state[plain] = value
    return wkey


def remember(name: str, scope: str | None = None):
    """Copy the widget's value to the plain key and return it (call right after drawing the widget)."""
    st.session_state[_plain(name, scope)] = st.session_state[f"w:{name}"]
    return st.session_state[_plain(name, scope)]


def field(draw: Callable, label: str, name: str, default, *args, options: Sequence | None = None,
          scope: str | None = None, **kwargs):
    """Draw a remembered widget and return its value: `draw` is the widget function (st.number_input,
    a column's selectbox, ...); `options` go to it as its second argument; `args`/`kwargs` follow."""
    key = remembered(name, default, options, scope)
    draw(label, *(() if options is None else (list(options),)), *args, key=key, **kwargs)
    return remember(name, scope)


def choose(name: str, value, scope: str | None = None) -> None:
    """Set a remembered choice from code (e.g. a chart click) before its widget is drawn."""
    st.session_state[_plain(name, scope)] = value
    st.session_state[f"w:{name}"] = value
    if scope is not None:
        st.session_state[f"w:{name}#scope"] = scope


def get(name: str, default=None, scope: str | None = None):
    return st.session_state.get(_plain(name, scope), default)
