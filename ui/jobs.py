"""Long work that a Stop button can end between steps, and that resumes after any other rerun.

A job is a session flag. Run sets it (button callback), Stop clears it (callback). Streamlit cannot
cancel work inside a step, but a click interrupts the script at its next st.* call and the callback
then clears the flag before the page draws again; `steps` also checks the flag after every step.
Any other rerun (a widget touched mid-run) finds the flag still set and resumes: finished steps come
back from their caches.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import streamlit as st

from analysis.errors import AnalysisError


def _flag(name: str) -> str:
    return f"job:{name}"


def start(name: str) -> None:
    st.session_state[_flag(name)] = True


def stop(name: str) -> None:
    st.session_state[_flag(name)] = False


def active(name: str) -> bool:
    return bool(st.session_state.get(_flag(name), False))


def buttons(name: str, run_label: str, disabled: bool = False, container=st) -> None:
    """Run (or Resume) and Stop, side by side; Stop is live only while the job runs."""
    left, right, _ = container.columns([1, 1, 4])
    left.button(run_label, key=f"{name}:run", on_click=start, args=(name,), disabled=disabled, type="primary")
    right.button("Stop", key=f"{name}:stop", on_click=stop, args=(name,), disabled=not active(name))


def steps(name: str, items: Iterable) -> Iterator:
    """Yield while the job is active; the flag is cleared when the items run out or a step fails."""
    try:
        for item in items:
            yield item
            if not active(name):
                return
    except AnalysisError:
        stop(name)
        raise
    stop(name)
