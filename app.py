"""State-rank dashboard: page config, the shared sidebar (model + inputs), and navigation over pages/."""
import streamlit as st

st.set_page_config(page_title="State-rank dashboard", page_icon="📐", layout="wide")

import analysis  # noqa: E402,F401  (CPU torch path for fla's ops; slow first import, once per process)
from ui import sidebar  # noqa: E402

sidebar.render()
page = st.navigation({
    "Inspect": [
        st.Page("pages/model.py", title="Model", icon="🧱", default=True),
        st.Page("pages/states.py", title="States & rank", icon="🌈"),
        st.Page("pages/query_noise.py", title="Query noise", icon="📡"),
    ],
    "Shrink": [
        st.Page("pages/importance.py", title="Channel importance", icon="⚖️"),
        st.Page("pages/prune.py", title="Prune", icon="✂️"),
        st.Page("pages/sweep.py", title="Sweep & latency", icon="📈"),
    ],
})
page.run()
