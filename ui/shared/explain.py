"""The "What am I seeing?" expander every page carries, for teaching."""
from __future__ import annotations

import streamlit as st


def explainer(text: str, formulas: list[str] = (), footer: str = "") -> None:
    with st.expander("What am I seeing?"):
        st.markdown(text)
        for formula in formulas:
            st.latex(formula)
        if footer:
            st.markdown(footer)
