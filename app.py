"""State-rank dashboard: page config, the shared sidebar (model + inputs), and navigation over pages/."""
import streamlit as st

st.set_page_config(page_title="State-rank dashboard", page_icon=":material/analytics:", layout="wide")

import analysis  # noqa: E402,F401  (CPU torch path for fla's ops; slow first import, once per process)
from ui import frame, sidebar  # noqa: E402

with frame.active():
    sidebar.render()
    page = st.navigation({
        "Inspect": [
            st.Page("pages/model.py", title="Model", icon=":material/view_in_ar:", default=True),
            st.Page("pages/states.py", title="States & rank", icon=":material/grid_on:"),
            st.Page("pages/query_noise.py", title="Query noise", icon=":material/graphic_eq:"),
        ],
        "Shrink": [
            st.Page("pages/importance.py", title="Channel importance", icon=":material/balance:"),
            st.Page("pages/prune.py", title="Prune", icon=":material/content_cut:"),
            st.Page("pages/sweep.py", title="Sweep & latency", icon=":material/show_chart:"),
        ],
    })
    page.run()
