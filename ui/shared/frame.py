"""Make sure every page runs inside app.py's frame (sidebar + st.navigation), even on a deep link.

The layout keeps page files in `pages/`, which Streamlit also knows as its legacy multipage folder: until
the first st.navigation call of the process, a request for /states runs pages/states.py directly,
without app.py, so there is no sidebar and no model choice. `ensure()` at the top of each page notices
that case and runs app.py itself (which calls st.navigation, switching the process to the modern mode,
and renders the requested page inside the frame), then ends the outer run.
"""
from __future__ import annotations

import contextlib
import runpy
import threading
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parents[2] / "app.py"
_local = threading.local()  # one script run at a time per session thread


@contextlib.contextmanager
def active():
    """Wrap app.py's body: pages rendered inside it know the frame is there."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def ensure() -> None:
    if getattr(_local, "depth", 0):
        return
    runpy.run_path(str(APP), run_name="__main__")
    st.stop()
