"""Prune page section: the layer-sensitivity map (live, stop/resume), the allocator, and the evidence table.

The map's points live in session state per (model, settings); the bundled samples' maps ship in
sample_models/results/ and are shown at once when the model and settings match. The "Allocate from
sensitivity" button beside "Suggest from rank" (ui.prune.ratios) calls `allocate_into_inputs`, which fills
the per-layer ratio inputs from the current map; "Verify and choose" prunes with that allocation, the
uniform plan and the rank-suggested plan (same budget) as a background job (ui.prune.verify_view).
"""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from analysis.shrink.allocate import allocate
from analysis.errors import AnalysisError
from analysis.shrink.sensitivity import (DEFAULT_EVAL_TOKENS, DEFAULT_RATIOS, RESULTS_DIR, MapSettings, build_map,
                                  compute_map, grid, load_shipped, shipped_strategies)
from analysis.shrink.strategies import STRATEGIES
from ui.shared import cache, cluster, jobs, notice, shrink, state
from ui.shared.blocks import layer_name
from ui.shared.context import Context
from ui.shared.parse import number_list
from ui.shared.points import merged
from ui.prune import plan_inputs, verify_view
from analysis.shrink.fitted_map import fitted
from ui.prune.sensitivity_figure import sensitivity_heatmap

JOB = "sensitivity"
RESULTS = "sensitivity_results"      # settings key -> {"points": [...], "profile": [...] | None, "source": str}
CURRENT = "sensitivity_current"      # {"key": ModelKey, "map": dict}: what the Allocate button reads
CHECK = verify_view.CHECK
ERROR_KEY = "suggest_error"          # shared with ui.prune.ratios: the error line under the two buttons
EVIDENCE = RESULTS_DIR / "sensitivity-evidence.json"


def allocate_into_inputs(key, round_to: int | None) -> None:
    """Button callback (beside "Suggest from rank"): per-layer ratios from the current map at the target mean."""
    current = st.session_state.get(CURRENT)
    try:
        if not current or current["key"] != key:
            raise AnalysisError("No sensitivity map for this model yet; run it in the Layer sensitivity section "
                                "below, then allocate.")
        target = float(st.session_state["w:suggest_target"])
        alloc = allocate(current["map"], mean_ratio=target, round_to=round_to)
        plan_inputs.fill(alloc.ratios, key)
        st.session_state.pop(CHECK, None)
        st.session_state.pop(ERROR_KEY, None)
    except AnalysisError as exc:
        st.session_state[ERROR_KEY] = str(exc)


def _settings(ctx: Context, strategy: str, calib: shrink.CalibrationSettings, ratios, eval_tokens: int,
              recall_sequences: int) -> MapSettings:
    return MapSettings(strategy=strategy, ratios=tuple(ratios), metric="recall" if ctx.task else "ppl",
                       eval_tokens=eval_tokens, calib_sequences=calib.sequences, calib_tokens=calib.tokens,
                       seed=calib.seed, recall_sequences=recall_sequences)


def _entry(ctx: Context, s: MapSettings) -> dict:
    """This session's points for (model, settings), seeded from the shipped map when it matches."""
    key = json.dumps({"model": ctx.key.path, "device": ctx.key.device, "dtype": ctx.key.dtype, **s.as_dict()},
                     sort_keys=True)
    entry = st.session_state.setdefault(RESULTS, {}).setdefault(key, {"points": [], "profile": None, "source": ""})
    if not entry["points"]:
        shipped = load_shipped(ctx.model, ctx.name, s)
        if shipped:
            entry["points"] = [{"layer": None, "ratio": 0.0, "value": shipped["baseline"]}, *shipped["points"]]
            entry["profile"], entry["source"] = shipped["layers"], "shipped with the sample"
    return entry


def row_names(ctx: Context) -> list[str]:
    """The map's rows named as the ratio inputs are ("layer 3 (block 4)" in a hybrid)."""
    return [layer_name(ctx.info, i) for i in range(ctx.info.layers)]


def _profile_table(ctx: Context, profile: list[dict]) -> pd.DataFrame:
    return pd.DataFrame({"dk": [r["head_k_dim"] for r in profile],
                         "rank util. u": [r["rank_utilization"] for r in profile],
                         "state bytes": [r["state_bytes"] for r in profile]},
                        index=pd.Index([layer_name(ctx.info, r["layer"]) for r in profile], name="layer"))


def compact(ctx: Context, strategy: str, ratios: list[float], smap: dict | None, prediction: str | None) -> None:
    """The small map beside the per-layer ratio inputs (same rows, the typed ratio outlined where it is one of the
    map's columns) and the typed plan's prediction under it, so one can be read while typing the other."""
    if smap is None:
        st.caption(f"No {STRATEGIES[strategy].label} sensitivity map for this model yet: run it in **Layer "
                   "sensitivity** below and it appears here, beside the inputs.")
        return
    g, measured = grid(fitted(smap)), grid(smap)   # the fitted map the prediction reads; the cells as measured
    metric = smap["metric"]
    marked = [next((j for j, r in enumerate(g.ratios) if abs(r - typed) < 1e-9), None) for typed in ratios]
    loss_label = "Δ log ppl (nats/token)" if metric == "ppl" else "drop in recall accuracy"
    st.plotly_chart(sensitivity_heatmap(g.ratios, g.losses, g.values, g.dims, loss_label,
                                        "validation perplexity" if metric == "ppl" else "recall accuracy",
                                        f"Map (one layer pruned at a time): {loss_label}", g.ses, row_names(ctx), metric,
                                        marked, compact=True, raw=measured.losses, raw_ses=measured.ses),
                    key="sens_compact")
    st.caption("Fitted map (0 at ρ = 0, never falling; what the prediction reads). Outlined: the ratio typed for "
               "that layer. Hover a cell for the cell as measured, its paired SE"
               + (" and perplexity change." if metric == "ppl" else ".") + (f" **{prediction}**" if prediction else ""))


def section(ctx: Context, strategy: str, calib: shrink.CalibrationSettings, round_to: int | None, plan: dict) -> None:
    """Draw the whole section (call once from the Prune page); plan: the inputs' {"ratios", "dims"}."""
    st.subheader("Layer sensitivity")
    recall = ctx.task is not None
    st.caption("Each layer pruned **alone** at each ratio with the strategy above (all other layers intact); "
               + ("colour: drop in recall accuracy on synthetic sequences of a seed apart from the test seed."
                  if recall else "measured as Δ log perplexity (nats/token) on the **map tokens** (the validation "
                  "split's first tokens); the colour and numbers are the **fitted** map (per layer: weighted "
                  "isotonic regression of the cells, 0 at ρ = 0, never falling as ρ grows; the measured cell ± SE "
                  "is in the hover), which the prediction sums and the allocator minimises.")
               + " *Allocate from sensitivity* (beside *Suggest from rank*, in per-layer mode) picks the ratios "
               "with the least predicted loss at the same state bytes as the uniform plan (exact knapsack over "
               "every dim down to the smallest measured one); *Verify and choose* measures the plan in the inputs "
               "beside the allocator's, uniform and rank-suggested on **choice tokens** and answers on **held-out "
               "tokens** (the test split).")
    c1, c2 = st.columns([3, 2])
    ratio_text = state.field(c1.text_input, "Map ratios ρ (comma-separated)", "sens_ratios",
                             ", ".join(f"{r:g}" for r in DEFAULT_RATIOS))
    if recall:
        recall_sequences = int(state.field(c2.number_input, "Recall sequences per point", "sens_recall_sequences",
                                           256, 8, 4096, step=8))
        eval_tokens = DEFAULT_EVAL_TOKENS
    else:
        eval_tokens = int(state.field(c2.number_input, "Validation tokens per point", "sens_eval_tokens",
                                      DEFAULT_EVAL_TOKENS, 64, 10**6, step=1024))
        recall_sequences = 256
    try:  # not guard(): a typo here must not stop the rest of the Prune page
        ratios = number_list(ratio_text, "map ratios", 0.01, 1.0)
        s = _settings(ctx, strategy, calib, ratios, eval_tokens, recall_sequences)
    except AnalysisError as exc:
        st.error(str(exc))
        return
    entry = _entry(ctx, s)
    entry["profile"] = shrink.rank_profile(ctx, calib)  # the one profile (Suggest from rank reads it too)
    points = entry["points"]
    shipped = shipped_strategies(ctx.name)
    if not points and shipped:
        st.info(f"Maps shipped with {ctx.name} (default map settings): {', '.join(shipped)}; choose that strategy "
                "above to see one at once, or run this one.")
    expected = 1 + ctx.info.layers * len(ratios)
    label = "Run map" if not points else "Resume map" if len(points) < expected else "Run again (cached)"
    job_key = json.dumps({"model": list(ctx.key), **s.as_dict()}, sort_keys=True)  # the job belongs to these inputs
    if jobs.controls(JOB, job_key, label):
        _launch(ctx, s, calib, entry, expected, job_key)
    other = jobs.busy_elsewhere(JOB, job_key)
    if other is not None:
        st.info(jobs.other_inputs_note(other))
    job = jobs.mine(JOB, job_key)
    progress = st.empty()
    left, right = st.columns([3, 2])
    chart, noticed, table = left.empty(), left.empty(), right.empty()
    drawn = [0]
    loss_label = "drop in recall accuracy" if recall else "Δ log perplexity (nats/token)"
    value_label = "recall accuracy" if recall else "validation perplexity"

    def draw():
        smap = build_map(ctx.model, s, entry["profile"] or [], points, ctx.task, ctx.name,
                         cache.model_identity(ctx.key)) if points else None
        g = grid(fitted(smap)) if smap else None   # the one fitted map: colour, text, prediction, allocator
        measured = grid(smap) if smap else None    # the cells as measured: in the hover
        n = ctx.info.layers
        empty = [[None] * len(ratios) for _ in range(n)]
        drawn[0] += 1
        base = next((p["value"] for p in points if p["layer"] is None), None)
        title = f"{STRATEGIES[strategy].label}: each layer alone" + (f" (unpruned {value_label} {base:.4g})"
                                                                     if base is not None else "")
        if g is None:  # a sentence, not blank axes, until the first point
            chart.info(f"No map for these settings yet: press **{label}** to measure each layer at each ratio; "
                       "the map fills in point by point.")
        else:
            chart.plotly_chart(sensitivity_heatmap(ratios, g.losses if g else empty, g.values if g else empty,
                                                   g.dims if g else empty, loss_label, value_label, title,
                                                   g.ses if g else None, row_names(ctx), s.metric,
                                                   raw=measured.losses, raw_ses=measured.ses),
                               key=f"sens_chart_{drawn[0]}")
            noticed.caption(notice.sensitivity(ratios, measured.losses, measured.ses, row_names(ctx)))
        if entry["profile"]:
            table.dataframe(_profile_table(ctx, entry["profile"]).style.format({"rank util. u": "{:.3f}",
                                                                       "state bytes": "{:,}"}))
        return smap

    smap = draw()
    if jobs.unsettled(job):
        jobs.follow(job, lambda j: (progress.progress(j.fraction, text=j.text), draw()))
        st.rerun()  # finished or stopped: redraw the buttons and captions for the new results
    if job is not None and job.error:
        st.error(job.error)
        return
    if points and len(points) < expected:
        st.info(f"Stopped after {len(points)} of {expected} points; **Resume map** continues from the cache.")
    if smap:
        st.session_state[CURRENT] = {"key": ctx.key, "map": smap}
        measure = smap["measure"]
        st.caption(f"{ctx.name} · {measure} · strategy {STRATEGIES[strategy].label} · calibration "
                   f"{calib.sequences} sequences (seed {calib.seed}) · u: {shrink.profile_caption(ctx, calib)} (the one "
                   f"profile Suggest from rank uses) · state bytes: fp32, per sequence · device "
                   f"{smap['device']} · dtype {smap['dtype']} · {entry['source']}")
        st.download_button("Download map (JSON)", json.dumps(smap, indent=2), file_name=f"sensitivity-{strategy}.json",
                           mime="application/json", on_click="ignore", key="sens_json")
        verify_view.section(ctx, calib, smap, plan, round_to)
    _evidence()


def _launch(ctx: Context, s: MapSettings, calib: shrink.CalibrationSettings, entry: dict, expected: int,
            key: str) -> None:
    """The map as a background job (stoppable inside a point, ends with its session); what its thread uses is
    resolved here, in the script run, so the thread never calls Streamlit."""
    use, model, task, points, name = shrink.using(ctx.key), ctx.model, ctx.task, entry["points"], ctx.name
    calibrated = shrink.calibration.bind(ctx.key, calib, _using=use) if STRATEGIES[s.strategy].needs_calibration \
        else None
    profile = entry["profile"]  # the one memoized profile, measured on the core's own profile inputs

    def work(job):
        def arrived(point):
            merged(points, point, lambda a, b: (a["layer"], a["ratio"]) == (b["layer"], b["ratio"]))
            entry["source"] = f"measured in this session, {cluster.where(executor)} (cached on disk)"
            job.items = points
            job.report(min(1.0, len(points) / expected), f"{len(points)} of {expected} points (unpruned first)")
        job.report(0.0, f"0 of {expected} points (unpruned first)")
        # the core's one map workflow (the CLI's `sensitivity` calls it too); the map drawn is build_map's
        return compute_map(model, use.tokenizer, s, task, on_point=arrived, profile=profile, cancel=job.cancelled,
                           get_calibration=calibrated and (lambda: calibrated(cancel=job.cancelled)),
                           lock=cluster.lock_for(executor, use.lock), name=name, executor=executor)

    executor = cluster.executor()
    jobs.launch(JOB, key, f"{ctx.name}, {STRATEGIES[s.strategy].label} at ρ = "
                f"{', '.join(f'{r:g}' for r in s.ratios)} ({cluster.where(executor)})", work)


def _evidence() -> None:
    if not EVIDENCE.exists():
        return
    try:
        rows = json.loads(EVIDENCE.read_text())
    except (OSError, json.JSONDecodeError):
        return
    with st.expander("Evidence: uniform vs rank-suggested vs sensitivity-allocated (bundled samples)"):
        st.dataframe(pd.DataFrame(rows["table"]), hide_index=True)
        st.caption(rows["caption"])
