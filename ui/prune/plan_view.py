"""The Prune page's prediction for the plan being typed (uniform or per layer): the sensitivity map's predicted
loss ± σ (analysis.shrink.predict, the same numbers as `python -m analysis plan`), with its state bytes and kernel
tiles, beside the allocator's, the uniform and the rank-suggested plans at the same state bytes (the plans
*Verify and choose* measures), and whether the map can tell them apart."""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from analysis.errors import AnalysisError
from analysis.shrink.allocate import plan_entry, plans_beside, recommend
from analysis.shrink.number_format import signed, signed_percent
from analysis.shrink.predict import INDISTINGUISHABLE, indistinguishable, predict, summary
from analysis.shrink.sensitivity import shipped_strategies
from analysis.shrink.strategies import STRATEGIES
from ui.shared.context import Context
from ui.prune.sensitivity_view import CURRENT  # {"key", "map"}: the map the Layer sensitivity section shows

PREDICTION = "plan_prediction"   # {"key", "prediction"}: the prediction last drawn (the CLI equivalence test reads it)
RECOMMENDATION = "plan_recommendation"  # {"key", "recommendation"}: `plan --recommend`'s plan at the typed budget


def current_map(ctx: Context, strategy: str) -> dict | None:
    """This model's map for `strategy` as the Layer sensitivity section last built it (shipped or measured)."""
    held = st.session_state.get(CURRENT)
    if held and held["key"] == ctx.key and held["map"]["strategy"] == strategy and held["map"]["points"]:
        return held["map"]
    return None


def _cell(p: dict, metric: str) -> str:
    if p["predicted_loss"] is None:
        return "— (a layer not on the map yet)"
    loss, sigma = p["predicted_loss"], p["predicted_uncertainty"]
    if metric == "ppl":
        return f"{signed(loss)} ± {sigma:.4f}  ({signed_percent(math.expm1(loss))})"
    return f"{signed(-loss)} ± {sigma:.4f}"


def typed_line(ctx: Context) -> str | None:
    """The typed plan's prediction in one line (beside the compact map), or None before there is one."""
    held = st.session_state.get(PREDICTION)
    if not held or held["key"] != ctx.key or held["prediction"]["predicted_loss"] is None:
        return None
    pred = held["prediction"]
    loss, sigma = pred["predicted_loss"], pred["predicted_uncertainty"]
    if pred["metric"] == "ppl":
        return (f"Your plan, predicted: {signed(loss)} ± {sigma:.4f} nats/token (1σ), perplexity "
                f"{signed_percent(math.expm1(loss))}.")
    return f"Your plan, predicted: Δ recall accuracy {signed(-loss)} ± {sigma:.4f} (1σ)."


def section(ctx: Context, strategy: str, ratios: list[float], dims: list[int], round_to: int | None,
            heads: list[int] | None = None) -> list[dict]:
    """Draw the prediction (call after the Layer sensitivity section ran in this script run, into a container
    placed under the plan table); returns the plans shown with their predictions (yours first), or [].
    heads: the value heads per layer a "Both" plan keeps (None: every head stays)."""
    st.markdown("**Predicted from the sensitivity map** (before pruning anything)")
    if heads is not None:
        st.caption("Your plan also removes whole heads. The sensitivity map measured key channels only, so the "
                   "prediction below and *your plan* in Verify and choose are its key-channel part alone (state "
                   "bytes with every head kept); the head removal's cost is not in them.")
    smap = current_map(ctx, strategy)
    if smap is None:
        shipped = shipped_strategies(ctx.name)
        st.caption(f"No {STRATEGIES[strategy].label} sensitivity map for {ctx.name} yet, so no prediction: run it "
                   "in **Layer sensitivity** below" + (f", or choose a strategy whose map ships ({', '.join(shipped)})"
                                                         if shipped else "") + ".")
        return []
    try:
        pred = predict(smap, dims, strategy)
    except AnalysisError as exc:
        st.error(str(exc))
        return []
    st.session_state[PREDICTION] = {"key": ctx.key, "prediction": pred}
    try:
        plans = plans_beside(smap, {"ratios": ratios, "dims": dims}, round_to)[1]
        note = None
    except AnalysisError as exc:  # a plan outside what the map can allocate: shown alone, with why
        plans, note = [plan_entry(smap, "your plan", ratios, dims)], str(exc)
    metric = smap["metric"]
    unit = "Δ log perplexity, nats/token ± 1σ (perplexity %)" if metric == "ppl" else "Δ recall accuracy ± 1σ"
    st.dataframe(pd.DataFrame({"dk'": [" ".join(map(str, p["dims"])) for p in plans],
                               f"predicted {unit}": [_cell(p, metric) for p in plans],
                               "state bytes": [f"{p['state_bytes']:,}" for p in plans]},
                              index=pd.Index([p["name"] for p in plans], name="plan")), key="plan_prediction_table")
    st.caption(f"Your plan: {summary(pred)}. Predicted: {pred['predicts']}, from the fitted map ({pred['fit']}); "
               f"between the map's ratios: {pred['interpolation']}. σ: the fitted cells' noise, the between-text and "
               "additivity terms, the interpolation and the selection of cells that look cheap, calibrated on "
               f"held-out text (docs/held-out.md). Map: {smap['measure']} (map tokens). The other rows: at your "
               "plan's state bytes.")
    _recommendation(ctx, smap, pred, round_to)
    mine, others = plans[0], plans[1:]
    close = [p["name"] for p in others if tuple(p["dims"]) != tuple(mine["dims"]) and indistinguishable(mine, p)]
    if close:
        st.info(f"Your plan and {', '.join(close)}: {INDISTINGUISHABLE} (*Verify and choose*, below).")
    if note:
        st.caption(f"No allocator's plan at these state bytes: {note}")
    return plans


def _use(ratios, key) -> None:
    from ui.prune import plan_inputs
    from ui.shared import state
    plan_inputs.fill(ratios, key)
    state.choose(plan_inputs.MODE, plan_inputs.PER_LAYER)


def _recommendation(ctx: Context, smap: dict, pred: dict, round_to: int | None) -> None:
    """The recommended plan at the typed plan's budget (its state-bytes mean ratio): `plan --recommend`'s."""
    if smap["metric"] != "ppl" or pred["predicted_loss"] is None:
        return
    mean = round(1 - pred["state_bytes"] / pred["state_bytes_unpruned"], 4)
    if mean <= 0:
        return
    try:
        rec = recommend(smap, mean, round_to)
    except AnalysisError:
        return  # a budget the map cannot allocate: the table above says why
    st.session_state[RECOMMENDATION] = {"key": ctx.key, "recommendation": rec}
    ratios = ", ".join(f"{r:.4g}" for r in rec["ratios"])
    st.caption(f"**Recommended at mean ratio {mean:g}** (`python -m analysis plan {ctx.name} --recommend --budget "
               f"{mean:g}`): {rec['plan']}, ratios {ratios} (dk' {' '.join(map(str, rec['head_k_dims']))}), "
               f"predicted {signed(rec['predicted_loss'])} ± {rec['predicted_uncertainty']:.4f} nats/token on held-out "
               f"text — {rec['reason']}.")
    st.button("Use the recommended plan in the inputs", key="plan_use_recommended", on_click=_use,
              args=(rec["ratios"], ctx.key))
