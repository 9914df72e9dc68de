"""One-shot button clicks tied to the settings they were made for.

A page that runs heavy work only on request draws its button with `on_click=click, args=(job, settings)`
and asks `clicked_for(job, settings)` before drawing it: True only in the run right after a click for
exactly these settings, so a later rerun or a changed setting never starts (or resumes) the work by itself.
"""
from __future__ import annotations

import streamlit as st


def click(job: str, settings: tuple) -> None:
    st.session_state[f"{job}:clicked"] = settings


def clicked_for(job: str, settings: tuple) -> bool:
    return st.session_state.pop(f"{job}:clicked", None) == settings
