"""Streamlit-side helpers of the dashboard, in rooms: ui/<page>/ holds what only that page of pages/ draws,
ui/compare/ and ui/heads/ the two features several pages show, ui/shared/ what more than one room uses (caching,
session state, background jobs, figures, captions). A room imports ui.shared and itself only; ui.shared imports no
room.

Only this package and the pages import streamlit; `ui.shared.figures` and `ui.shared.labels` are pure (testable
without a running app). The analysis core (`analysis/`) never imports anything from here.
"""
