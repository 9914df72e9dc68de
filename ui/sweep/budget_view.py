"""The Sweep page's equal-budget comparison: fewer heads or smaller keys? Plans that keep the same fraction of the
recurrent state (dk, heads, mixed), scored as a background job (analysis.runs.budget_sweep, the CLI's
`sweep --axis`), drawn on one state-bytes axis with paired standard errors."""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from analysis.defaults import HEAD_STRATEGY_NAMES
from analysis.errors import AnalysisError
from analysis.evaluate.measure import Evaluation
from analysis.runs.budget_sweep import budget_sweep, plans
from analysis.shrink.heads.strategies import get_head_strategy
from analysis.shrink.prune import usable_strategies
from analysis.shrink.strategies import STRATEGIES
from ui.shared import cluster, jobs, shrink, state
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.parse import number_list
from ui.sweep.budget_figure import budget_chart

AXES = {"both": "dk, heads and mixed", "dk": "dk only", "heads": "heads only"}


def section(ctx: Context) -> None:
    st.header("Fewer heads or smaller keys? (equal state budget)")
    st.caption("Each budget keeps a fraction of the recurrent state three ways: shrink dk in every head (a channel "
               "strategy), remove whole heads (a head strategy), or both (heads to ≈√budget, then dk). Every plan is "
               "scored on the same test windows as the unpruned model; Δ log perplexity carries its paired standard "
               "error over those windows. The same points as `python -m analysis sweep MODEL --axis both`.")
    if ctx.task is not None:
        st.info("The equal-budget comparison scores text perplexity; this recall model has no tokenizer.")
        return
    calib = shrink.CalibrationSettings()
    c1, c2, c3, c4 = st.columns([1, 2, 2, 1])
    axis = state.field(c1.selectbox, "Plans", "budget_axis", "both", options=list(AXES), format_func=AXES.get)
    usable, _ = usable_strategies(ctx.model)
    strategies = state.field(c2.multiselect, "Channel strategies", "budget_strategies", ["wanda"], options=usable,
                             format_func=lambda n: STRATEGIES[n].label)
    heads = state.field(c3.multiselect, "Head strategies", "budget_head_strategies", ["rank-norm", "random"],
                        options=list(HEAD_STRATEGY_NAMES), format_func=lambda n: get_head_strategy(n).label)
    text = state.field(c4.text_input, "Budgets", "budget_fractions", "0.75, 0.5, 0.25")
    tokens = int(state.field(st.number_input, "Test tokens to score", "budget_tokens", 4096, 512, 10**6, step=1024))
    try:
        budgets = number_list(text, "state budgets", 0.0, 1.0)
    except AnalysisError as exc:
        st.error(str(exc))
        return
    todo = plans(axis, strategies, heads, budgets or [])
    if not budgets or not todo:
        st.info("Pick the strategies the chosen plans need, and at least one budget.")
        return
    key = json.dumps({"model": list(ctx.key), "axis": axis, "strategies": strategies, "heads": heads,
                      "budgets": budgets, "tokens": tokens})
    points = st.session_state.setdefault("budget_results", {}).setdefault(key, [])
    if jobs.controls("budget", key, "Compare at equal budgets"):
        with guard():
            _launch(ctx, axis, strategies, heads, budgets, tokens, calib, points, len(todo) + 1, key)
    job = jobs.mine("budget", key)
    chart, table = st.empty(), st.empty()

    def draw(job=None):
        if not points:
            chart.info("No points yet: press **Compare at equal budgets** (the unpruned model is scored first).")
            return
        chart.plotly_chart(budget_chart(points, "Δ log perplexity vs state bytes kept"),
                           key=f"budget_chart_{len(points)}_{id(job)}")
        table.table(points_table(points))
    draw()
    if jobs.unsettled(job):
        jobs.follow(job, draw)
        st.rerun()
    if job is not None and job.error:
        st.error(job.error)
    if points:
        st.caption(f"{ctx.name} · {points[0]['dataset']} · context {points[0]['context']}, {points[0]['tokens']:,} "
                   f"scored tokens · calibration 16 × 256 train-split tokens · device {points[0]['device']} · dtype "
                   f"{points[0]['dtype']} · error bars: ± one paired standard error over the test windows")


def points_table(points: list) -> pd.DataFrame:
    rows = [{"plan": p["kind"], "channel strategy": p["strategy"], "head strategy": p["head_strategy"],
             "budget": p["budget"], "state kept": f"{p['state_fraction']:.3f}",
             "value heads": str(p["value_heads"]), "dk'": str(p["head_k_dims"]), "perplexity": f"{p['perplexity']:.3f}",
             "Δ log ppl ± SE": "—" if p["kind"] == "unpruned" else f"{p['delta_log_ppl']:+.4f} ± {p['se']:.4f}"}
            for p in points]
    return pd.DataFrame(rows).set_index("plan")


def _launch(ctx, axis, strategies, heads, budgets, tokens, calib, points, expected, key) -> None:
    use = shrink.using(ctx.key)

    def work(job):
        gen = budget_sweep(use.model, use.tokenizer, axis, strategies, heads, budgets, Evaluation(max_tokens=tokens),
                           calib, cancel=job.cancelled, executor=executor)
        job.report(0.0, f"0 of {expected} points (unpruned first)")
        for point in shrink.locked(gen, cluster.lock_for(executor, use.lock)):
            points.append({k: v for k, v in point.items() if k != "window_losses"})
            job.items = points
            job.report(len(points) / expected, f"{len(points)} of {expected} points")

    executor = cluster.executor()
    jobs.launch("budget", key, f"{ctx.name}: {AXES[axis]} plans at budgets {budgets} ({cluster.where(executor)})",
                work)
