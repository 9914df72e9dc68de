"""The allocation under the sensitivity map and "Verify and choose": a background job (named steps, Stop)
that prunes with the allocated, uniform and rank-suggested plans, measures each once on the map's split, and
puts the best measured plan into the per-layer inputs."""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from analysis.shrink.allocate import allocate_and_choose, candidates
from analysis.shrink.strategies import STRATEGIES
from ui import jobs, plan_inputs, shrink
from ui.context import Context

JOB = "verify"
ALLOCATION = "sensitivity_allocation"
CHECK = "sensitivity_check"


def signed(x) -> str:
    """A loss cell: signed, or a dash with the reason (never a literal None)."""
    return "— (off the map's measured dims)" if x is None else f"{x:+.4f}"


def section(ctx: Context, calib: shrink.CalibSettings) -> None:
    held = st.session_state.get(ALLOCATION)
    if not held or held["key"] != ctx.key:
        return
    alloc = held["alloc"]
    st.markdown(f"**Allocation** ({alloc.target}, {alloc.cost:,} of {alloc.budget:,} {alloc.unit.replace('_', ' ')}): "
                f"ratios {alloc.ratios}, dk' {alloc.dims}")
    key = json.dumps({"model": list(ctx.key), "dims": alloc.dims, "mean": held["mean_ratio"],
                      "round": held["round_to"], "calib": list(calib)})
    if jobs.controls(JOB, key, "Verify and choose: measure it, uniform and rank-suggested (validation split)",
                     run_key="sens_verify"):
        _launch(ctx, calib, held, key)
    job = jobs.mine(JOB, key)
    if job is not None and job.state == "done" and not job.taken:
        choice = job.result["choice"]
        st.session_state[CHECK] = {"key": ctx.key, "alloc_dims": alloc.dims, **choice, "report": job.result}
        job.taken = True
        plan_inputs.offer(choice["ratios"], ctx.key)
        st.rerun()  # the inputs above take the chosen plan before they are drawn
    if jobs.unsettled(job):
        jobs.follow_in_status(job, f"Verify and choose: {job.label}…")
    if job is not None and job.error:
        st.error(job.error)
    elif job is not None and job.state == "stopped":
        st.info("Verify and choose was stopped; press it again to measure the plans.")
    check = st.session_state.get(CHECK)
    if check and check["key"] == ctx.key and check["alloc_dims"] == alloc.dims:
        _table(check, alloc)
        st.download_button("Download allocation (JSON)", json.dumps(check["report"], indent=2),
                           file_name=f"allocation-{alloc.strategy}.json", mime="application/json",
                           on_click="ignore", key="verify_json")


def _launch(ctx: Context, calib: shrink.CalibSettings, held: dict, key: str) -> None:
    """Resolved here in the script run (calibration, tokenizer, lock); the thread gets plain objects."""
    alloc, use, smap = held["alloc"], shrink.using(ctx.key), held["map"]
    needs = STRATEGIES[alloc.strategy]
    ms = smap["settings"]  # a recall map has no calib_tokens (the task fixes the length)
    mine = ((calib.sequences, calib.seed) == (ms["calib_sequences"], ms["seed"])
            and ms["calib_tokens"] in (None, calib.tokens))
    # the shared calibration only when it is the map's own (else the core draws the map's, as the CLI does)
    calibrated = shrink.calibration.bind(ctx.key, calib, _using=use) if needs.needs_calibration and mine else None
    plans = candidates(smap, alloc, round_to=held["round_to"], mean_ratio=held["mean_ratio"])
    model, task = ctx.model, ctx.task

    def work(job):
        c = None
        if calibrated is not None:
            job.report(0.0, "calibrating…")
            c = calibrated(progress=lambda f, text: job.report(0.0, f"calibrating: {text}"), cancel=job.cancelled)
            if needs.needs_gradients:
                with use.lock:
                    c.gradients(cancel=job.cancelled)
        with use.lock:  # the core's one allocate-and-choose workflow (the CLI's `prune --allocate` calls it too)
            return allocate_and_choose(model, use.tokenizer, smap, {"mean_ratio": held["mean_ratio"]},
                                       held["round_to"], task, c, progress=job.report, cancel=job.cancelled)

    jobs.launch(JOB, key, f"{len({tuple(p['dims']) for p in plans})} distinct plans of {ctx.name}", work)


def _table(check: dict, alloc) -> None:
    rows = check["candidates"]
    st.dataframe(pd.DataFrame({
        "ratios": [", ".join(f"{r:.3g}" for r in c["ratios"]) for c in rows],
        "dk'": [" ".join(map(str, c["dims"])) for c in rows],
        "state bytes" if alloc.unit == "state_bytes" else "tiles": [c["cost"] for c in rows],
        "predicted loss": [signed(c["predicted_loss"]) for c in rows],
        "measured loss": [signed(c["measured_loss"]) for c in rows],
        "measured": [f"{c['measured_value']:.4f}" for c in rows],
        "measured as": [c["same_as"] if c["same_as"] != c["name"] else "" for c in rows]},
        index=pd.Index([c["name"] for c in rows], name="plan")))
    knap = rows[0]
    st.caption(f"{check['measure']} · unpruned {check['baseline_value']:.4f} · additive-model error of the "
               f"allocation (measured − predicted loss) {knap['measured_loss'] - alloc.predicted_loss:+.4f} · "
               f"plans with the same dk' are measured once (\"measured as\") · "
               f"chosen: **{check['winner']}** ({check['reason']}); the per-layer inputs now hold it.")
