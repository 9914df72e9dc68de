"""Streamlit-side helpers of the dashboard: caching, session state, error display, figures, captions.

Only this package and the pages import streamlit; `ui.figures` and `ui.labels` are pure (testable
without a running app). The analysis core (`analysis/`) never imports anything from here.
"""
