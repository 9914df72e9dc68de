"""The Shrink pages wait for the pruning engine (`analysis.strategies`); say so plainly until it exists."""
from __future__ import annotations

import importlib.util

import streamlit as st


def engine_available() -> bool:
    try:
        return importlib.util.find_spec("analysis.strategies") is not None
    except (ImportError, ValueError):
        return False


def notice_if_missing(what: str) -> bool:
    """Show an st.info when the engine is missing; True when the page can go on."""
    if engine_available():
        return True
    st.info(f"{what} is coming in the pruning engine (`analysis.strategies`), which is not installed in this "
            "build yet; the Inspect pages work now.")
    return False
