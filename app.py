"""State-rank dashboard: page config, the shared sidebar (model + inputs), and navigation over pages/."""
from pathlib import Path

import streamlit as st

# A local image, served by this server: a material icon or emoji favicon is fetched from a CDN (fails offline).
FAVICON = Path(__file__).resolve().parent / "ui" / "assets" / "favicon.png"
st.set_page_config(page_title="State-rank dashboard", page_icon=str(FAVICON), layout="wide")

from ui import frame, sidebar, style  # noqa: E402

with frame.active():
    style.apply()
    sidebar.render()
    page = st.navigation({
        "Inspect": [
            st.Page("pages/model.py", title="Model", icon=":material/view_in_ar:", default=True),
            st.Page("pages/states.py", title="States & rank", icon=":material/grid_on:"),
            st.Page("pages/query_noise.py", title="Query noise", icon=":material/graphic_eq:"),
            st.Page("pages/state_lab.py", title="State lab", icon=":material/science:"),
        ],
        "Shrink": [
            st.Page("pages/importance.py", title="Channel importance", icon=":material/balance:"),
            st.Page("pages/prune.py", title="Prune", icon=":material/content_cut:"),
            st.Page("pages/sweep.py", title="Sweep & latency", icon=":material/show_chart:"),
        ],
    })
    page.run()
