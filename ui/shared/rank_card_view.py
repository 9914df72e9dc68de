"""A head's rank card: every count of "directions a state uses" side by side with its definition, the headline
(analysis.linalg.rank_card) first, so a page never shows one of them alone as *the* number."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from analysis.linalg.rank_card import HEADLINE_NAME, HEADLINE_WHY, rank_card


def show(where: str, spectra, tau: float, provenance: str, key: str) -> None:
    """An expander "Rank card: <where>" from the singular values [sequences, m] of one head's state."""
    with st.expander(f"Rank card: {where}", key=key):
        rows = rank_card(spectra, tau)
        st.dataframe(pd.DataFrame(rows).style.format({"value": "{:.3g}"}), hide_index=True)
        st.caption(f"{provenance} · each figure per sequence, then the mean. The headline is the {HEADLINE_NAME}: "
                   f"{HEADLINE_WHY}.")
