"""Show the core's one-sentence errors in the page instead of a traceback, and stop only that run."""
from __future__ import annotations

import contextlib

import streamlit as st

from analysis.errors import AnalysisError


@contextlib.contextmanager
def guard():
    """`with guard(): ...` — an AnalysisError becomes st.error(message) and ends this page run.

    The sidebar and navigation were drawn before the page ran, so the app stays usable: the next
    valid choice simply reruns the page. Unexpected exceptions are left to Streamlit (they are bugs).
    """
    try:
        yield
    except AnalysisError as exc:
        st.error(str(exc))
        st.stop()
