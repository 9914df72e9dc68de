"""State-rank dashboard: page config, the shared sidebar (model + inputs), and navigation over pages/."""
from pathlib import Path

import streamlit as st

import ui

# A local image, served by this server: a material icon or emoji favicon is fetched from a CDN (fails offline).
# Found through the ui package: an installed copy keeps this file in ui/shell/, a checkout at the top.
FAVICON = Path(ui.__file__).resolve().parent / "assets" / "favicon.png"
st.set_page_config(page_title="State-rank dashboard", page_icon=str(FAVICON), layout="wide")

from ui.shared import frame, navigation, sidebar, style  # noqa: E402

with frame.active():
    style.apply()
    sidebar.render()
    page = st.navigation({group: [st.Page(p.path, title=p.title, icon=p.icon, default=p.path == navigation.PAGES[0].path)
                                  for p in pages] for group, pages in navigation.groups().items()})
    page.run()
