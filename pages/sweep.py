"""Sweep & latency: perplexity vs pruning ratio per strategy, and kernel latency vs key dim, drawn live.
The page reads state, starts the jobs and draws; ui/sweep/ holds the parts."""
import streamlit as st

from ui.shared import frame
from ui.shared.context import current
from ui.sweep import budget_view, latency_view, sweep_view

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Sweep & latency")
sweep_view.explain()
ctx = current()
sweep_view.section(ctx)
budget_view.section(ctx)
latency_view.section(ctx)
