"""App-wide CSS, kept to what Streamlit's own options cannot do."""
from __future__ import annotations

import streamlit as st

# Streamlit (1.67) lays a multiselect's chips on one scrolling line and cuts what does not fit ("ation, not axis-aligned)");
# let them wrap onto more lines instead, so every chosen label stays readable.
CSS = """
<style>
[data-testid="stMultiSelectTagsContainer"],
[data-testid="stMultiSelectTagsContainer"] > [role="group"] {
  flex-wrap: wrap; overflow: visible; height: auto;
}
[data-testid="stMultiSelect"] [role="group"]:has([data-testid="stMultiSelectTagsContainer"]),
[data-testid="stMultiSelect"] .react-aria-ComboBox {
  height: auto; max-height: none;
}
</style>
"""


def apply() -> None:
    st.html(CSS)
