"""Prune: uniform or per-layer ratios (suggested from the rank profile, tile-aware); run, compare, save.
The page reads state, starts the prune and recovery jobs, and draws; ui/prune/ holds the parts."""
import streamlit as st

from analysis.shrink.heads.prune import plan_head_counts
from analysis.models.key_plan import plan_key_dims
from analysis.shrink.prune_run import unchanged
from ui.shared import cache, frame, made, shrink
from ui.shared.context import current
from ui.shared.errors import guard
from ui.prune import plan_history, plan_view, prune_form, prune_run, prune_save, sensitivity_view

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Prune")
ctx = current()
prune_form.explain(ctx)

settings = shrink.calibration_controls(ctx)
choice = prune_form.choices(ctx, settings)
with guard():
    planned = plan_key_dims(ctx.model, ratio=choice.ratio, ratios=choice.ratios, round_to=choice.rounding)
    heads = plan_head_counts(ctx.model, ratio=choice.head_ratio) if choice.head_strategy else None
refusal = unchanged(ctx.model, planned, choice.ratio, choice.ratios, choice.rounding, heads)  # as the CLI refuses
if refusal:
    st.error(refusal)
prune_form.plan_table(ctx, choice, planned, heads)
plan = {"ratios": choice.ratios or [choice.ratio] * ctx.info.layers, "dims": planned}
predicted = st.container()  # filled once the sensitivity section below has found this strategy's map

plans = []
if choice.strategy is not None:  # key channels: the sensitivity map, the allocator, Verify; the plan's prediction
    sensitivity_view.section(ctx, choice.strategy, settings, choice.rounding, plan)
    with predicted:
        plans = plan_view.section(ctx, choice.strategy, plan["ratios"], planned, choice.rounding, heads)
    if choice.map_slot is not None:  # per-layer mode: the map beside the inputs, read while typing
        with choice.map_slot.container():
            sensitivity_view.compact(ctx, choice.strategy, plan["ratios"], plan_view.current_map(ctx, choice.strategy),
                                     plan_view.typed_line(ctx))

ev = prune_form.evaluation(ctx)
tok = None if ctx.task is not None else cache.tokenizer(ctx.key.path)
prune_run.prune_job(ctx, choice, planned, settings, ev, tok, heads, refused=bool(refusal))

run = made.pruned_run()
run = run if run and run["key"] == ctx.key else None
if run:
    prune_run.take_recovery(run)  # before the history draws, so a finished recovery is a point there
plan_history.section(ctx, choice.strategy, plans)
if not run:
    st.info("Set the ratios and press **Prune**: the before/after comparison, recovery and saving appear here.")
    st.stop()

prune_run.comparison(ctx, run)
prune_run.recovery(ctx, run, ev, settings.seed, tok)
prune_save.section(ctx, run, tok)
