"""The Prune page's history of plans: every plan measured in this session (prunes, recoveries, Verify and choose,
sweep points) and every saved model of this model in the output folder, on one chart of Δ quality vs state
bytes (analysis.shrink.plan_points), one measurement at a time, with the uniform sweep of the strategy, the plan
being typed and the allocator's plan as predictions, and the Pareto front; a click puts a point's plan back
into the inputs. Downloads: CSV and JSON."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import streamlit as st

from analysis.io import reads, writes
from analysis.shrink import plan_points, prune_run
from analysis.shrink.number_format import nats_with_percent, signed
from ui.shared import made, state
from ui.shared.context import Context
from ui.shared.keys import ModelKey
from ui.prune import plan_inputs
from ui.prune.plan_figure import history_figure

HISTORY = "plan_history"         # model path -> {point id: point}, in the order measured
COUNT = "plan_history_count"     # labels: prune 1, verify 2, …
CHART = "plan_history_chart"     # the chart's key: its selection is read by `_restore`
GROUP = "plan_history_group"     # which measurement the chart shows
SEEN = "plan_history_seen"       # points already shown: a new one switches the chart to its measurement
RESTORED = "plan_history_restored"  # (sentence, restored?) a chart click leaves for the next run
RECOVERIES = "plan_history_recoveries"  # ids of the recoveries recorded: each is one point
SHOWN_PREDICTIONS = ("your plan", "sensitivity-allocated")  # predicted markers: the plan typed, the allocator's


def _label(kind: str) -> str:
    st.session_state[COUNT] = st.session_state.get(COUNT, 0) + 1
    return f"{kind} {st.session_state[COUNT]}"


def record(key: ModelKey, points: list[dict]) -> None:
    held = st.session_state.setdefault(HISTORY, {}).setdefault(key.path, {})
    for p in points:
        held[p["id"]] = p


def from_choice(report: dict) -> list[dict]:
    return plan_points.from_choice(report, _label("verify"))


def record_prune(key: ModelKey, run: dict) -> None:
    """A finished prune (the Prune page's job result)."""
    result = run["result"]
    record(key, [plan_points.from_measures("prune", _label("prune"), result.strategy, run["before"], run["after"],
                                           plan_points.value_heads(result.model),
                                           (result.info.get("heads") or {}).get("strategy"))])


def record_recovery(key: ModelKey, run: dict) -> None:
    """A finished recovery of a prune run (its measurement uses the prune's before as the unpruned model); once
    per recovery, however often the page asks."""
    rec, result = run["recovered"], run["result"]
    recorded = st.session_state.setdefault(RECOVERIES, set())
    if rec["id"] in recorded:
        return
    recorded.add(rec["id"])
    record(key, [plan_points.from_measures("recovered", f"{_label('recovery')} ({rec['steps']} steps)",
                                           result.strategy, run["before"], rec["measure"],
                                           head_strategy=(result.info.get("heads") or {}).get("strategy"))])


def gathered(ctx: Context) -> list[dict]:
    """This session's points of the model, its sweeps in this session, and its saved models."""
    points = list(st.session_state.get(HISTORY, {}).get(ctx.key.path, {}).values())
    here = (ctx.key.path, ctx.key.device, ctx.key.dtype)  # the model whatever its memory budget
    for n, (key, sweep) in enumerate(made.sweeps().items()):  # the Sweep page's, in this session
        settings = json.loads(key)
        if sweep and (settings["path"], settings["device"], settings["dtype"]) == here:
            points += plan_points.from_sweep(sweep, f"sweep {n + 1}")
    source = str(Path(ctx.key.path).resolve())
    for folder, mtime in reads.saved_folders(writes.output_root(), prune_run.PRUNING_FILE):
        found = _saved_point(folder, mtime)
        if found is not None and found[0] == source:
            points.append(found[1])
    return points


_SAVED: dict = {}  # (folder, mtime) -> (resolved source, point | None): each pruning.json is read once


def _saved_point(folder: Path, mtime: int):
    key = (str(folder), mtime)
    if key not in _SAVED:
        if len(_SAVED) > 1000:
            _SAVED.clear()
        meta = reads.json_object(folder / prune_run.PRUNING_FILE)
        run = prune_run.from_record(meta) if meta else None
        point = plan_points.from_pruning(run, f"saved {folder.name}") if run else None
        _SAVED[key] = (str(Path(run.source).resolve()), point) if point else None
    return _SAVED[key]


def _restore(by_id: dict, key: ModelKey) -> None:
    """Chart click callback (runs before the page draws the inputs): the clicked point's plan into them."""
    picked = ((st.session_state.get(CHART) or {}).get("selection") or {}).get("points") or []
    point = by_id.get((picked[0].get("customdata") or [None])[0]) if picked else None
    why = point and plan_points.not_restorable(point)
    if why:
        st.session_state[RESTORED] = (why, False)
    elif point is not None:
        plan_inputs.restore(point["ratios"], point["strategy"], key)
        st.session_state[RESTORED] = (f"The plan of {point['label']} is in the per-layer inputs above (its "
                                      "strategy, no rounding).", True)


def section(ctx: Context, strategy: str | None, predicted: list[dict]) -> None:
    """strategy: the channel strategy chosen (None: a Heads plan); predicted: plan entries with predicted_loss /
    predicted_uncertainty (the plan being typed first)."""
    st.subheader("History of plans")
    points = gathered(ctx)
    if not points:
        st.caption("Every plan measured in this session (Prune, recovery, Verify and choose, Sweep) and every saved "
                   "model of this model in the output folder appears here as a point of Δ quality vs state bytes.")
        return
    groups = list(dict.fromkeys(p["measure"] for p in reversed(points)))
    if st.session_state.get(SEEN) != len(points):  # a new measurement: show its group
        state.choose(GROUP, points[-1]["measure"])
        st.session_state[SEEN] = len(points)
    group = state.field(st.selectbox, "Measured on", GROUP, groups[0], options=groups,
                        format_func=lambda g: f"{g} ({sum(p['measure'] == g for p in points)} plans)")
    shown = [p for p in points if p["measure"] == group]
    front = plan_points.pareto(shown)
    metric = shown[0]["metric"]
    # one unit with the map, the prediction and Verify: nats/token, with the perplexity change beside it
    y_title = "Δ log perplexity (nats/token)" if metric == "ppl" else "Δ recall accuracy vs unpruned"

    def change(loss):
        return loss if metric == "ppl" else -loss

    def said(loss, sigma):
        return (f"{nats_with_percent(loss)} nats/token ± {sigma:.4f}" if metric == "ppl"
                else f"{signed(-loss)} ± {sigma:.4f}")
    marks = [{"name": p["name"], "state_bytes": p["state_bytes"], "y": change(p["predicted_loss"]),
              "said": said(p["predicted_loss"], p["predicted_uncertainty"]),
              **dict(zip(("lo", "hi"), sorted(change(p["predicted_loss"] + k * p["predicted_uncertainty"])
                                             for k in (-2, 2))))}
             for p in predicted if p["predicted_loss"] is not None and p["name"] in SHOWN_PREDICTIONS]
    by_id = {p["id"]: p for p in shown}
    st.plotly_chart(history_figure(shown, front, strategy, marks, f"Plans of {ctx.name}: measured Δ vs state",
                                   y_title), key=CHART, on_select=lambda: _restore(by_id, ctx.key),
                    selection_mode="points")
    restored = st.session_state.pop(RESTORED, None)
    if restored:
        (st.success if restored[1] else st.info)(restored[0])
    pct = "perplexity change (%)"
    table = pd.DataFrame({"source": [p["source"] for p in shown], "strategy": [p["strategy"] for p in shown],
                          "dk'": [" ".join(map(str, p["head_k_dims"])) for p in shown],
                          "value heads": [" ".join(map(str, p["value_heads"])) if p.get("value_heads") else ""
                                          for p in shown],
                          "state bytes": [p["state_bytes"] for p in shown],
                          **({y_title: [math.log1p(p["delta"]) for p in shown],
                              pct: [100 * p["delta"] for p in shown]}
                             if metric == "ppl" else {y_title: [p["delta"] for p in shown]}),
                          "Pareto front": ["yes" if p["id"] in front else "" for p in shown]},
                         index=pd.Index([p["label"] for p in shown], name="plan"))
    # numbers stay numbers (sortable); shown signed, never "-0.0000"
    formats = {y_title: signed, pct: lambda x: signed(x, 2)} if metric == "ppl" else {y_title: signed}
    st.dataframe(table.style.format(formats), key="plan_history_table")
    st.caption(f"{ctx.name} · {group} · Δ against the unpruned model on the same tokens · Pareto front: no other "
               "plan shown has fewer state bytes and less loss · Δ in nats/token, as the map, the prediction and Verify "
               "(hover: perplexity change beside it) · predicted (open markers, ±2σ): from the sensitivity "
               "map, on its own split · click a point to put its plan into the inputs.")
    d1, d2 = st.columns(2)
    d1.download_button("Download plans (CSV)", plan_points.to_csv(points), file_name="plans.csv", mime="text/csv",
                       on_click="ignore", key="plans_csv")
    d2.download_button("Download plans (JSON)", plan_points.to_json(points),
                       file_name="plans.json", mime="application/json", on_click="ignore", key="plans_json")
