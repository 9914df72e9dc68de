""""Verify and choose": a background job (named steps, Stop) that prunes with the plan in the inputs ("your plan")
and, at its state bytes, the allocated, uniform and rank-suggested plans, measures each once on the **choice**
tokens (disjoint from the map's; paired standard errors over windows; measurements cached, so a new plan costs
one), says which wins and whether by more than noise, then measures the chosen plan and uniform on **held-out**
tokens and shows that as the answer. The typed plan stays in the inputs; the recommendation is one click away."""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from analysis.errors import AnalysisError
from analysis.shrink.allocate import YOURS, allocate_and_choose, plans_beside
from analysis.shrink.number_format import nats_with_percent, signed
from analysis.shrink.strategies import STRATEGIES
from ui.shared import cluster, jobs, shrink
from ui.shared.context import Context
from ui.prune import plan_history, plan_inputs

JOB = "verify"
CHECK = "sensitivity_check"


def loss_cell(x, metric: str = "ppl") -> str:
    """A loss cell: signed (never "-0.0000"), with the perplexity change beside nats, or a dash with the reason
    (never a literal None)."""
    if x is None:
        return "— (a layer not on the map yet)"
    return nats_with_percent(x) if metric == "ppl" else signed(x)


def section(ctx: Context, calib: shrink.CalibrationSettings, smap: dict, plan: dict, round_to: int | None) -> None:
    """plan: the inputs' plan {"ratios", "dims"}; smap: the map the section shows."""
    key = json.dumps({"model": list(ctx.key), "strategy": smap["strategy"], "dims": plan["dims"], "round": round_to,
                      "calib": list(calib), "map": smap["settings"]})
    st.caption("**Verify and choose** prunes with your plan and, at its state bytes, the allocator's, the uniform "
               "and the rank-suggested plans, chooses between them on **choice tokens** (the validation split right "
               "after the map's tokens, 4× as many), then measures the chosen plan and uniform on **held-out "
               "tokens** (the test split), never used to choose: that is the answer.")
    if jobs.controls(JOB, key, "Verify and choose", run_key="sens_verify"):
        try:
            _launch(ctx, calib, smap, plan, round_to, key)
        except AnalysisError as exc:  # e.g. a plan the map cannot allocate around: one sentence, the page goes on
            st.error(str(exc))
    job = jobs.mine(JOB, key)
    if job is not None and job.state == "done" and not job.taken:
        choice = job.result["choice"]
        st.session_state[CHECK] = {"key": ctx.key, "strategy": smap["strategy"], **choice, "report": job.result}
        plan_history.record(ctx.key, plan_history.from_choice(job.result))
        job.taken = True
        st.rerun()  # the history above takes the measured plans (the typed plan stays in the inputs)
    if jobs.unsettled(job):
        jobs.follow_in_status(job, f"Verify and choose: {job.label}…")
    if job is not None and job.error:
        st.error(job.error)
    elif job is not None and job.state == "stopped":
        st.info("Verify and choose was stopped; press it again to measure the plans (finished ones are cached).")
    check = st.session_state.get(CHECK)
    if check and check["key"] == ctx.key and check["strategy"] == smap["strategy"]:
        _answer(check, ctx)
        _table(check)
        st.download_button("Download allocation (JSON)", json.dumps(check["report"], indent=2),
                           file_name=f"allocation-{smap['strategy']}.json", mime="application/json",
                           on_click="ignore", key="verify_json")


def _launch(ctx: Context, calib: shrink.CalibrationSettings, smap: dict, plan: dict, round_to: int | None,
            key: str) -> None:
    """Resolved here in the script run (calibration, tokenizer, lock); the thread gets plain objects."""
    use, strategy = shrink.using(ctx.key), smap["strategy"]
    needs = STRATEGIES[strategy]
    ms = smap["settings"]  # a recall map has no calib_tokens (the task fixes the length)
    mine = ((calib.sequences, calib.seed) == (ms["calib_sequences"], ms["seed"])
            and ms["calib_tokens"] in (None, calib.tokens))
    # the shared calibration only when it is the map's own (else the core draws the map's, as the CLI does)
    calibrated = shrink.calibration.bind(ctx.key, calib, _using=use) if needs.needs_calibration and mine else None
    plans = plans_beside(smap, plan, round_to)[1]  # a plan the map cannot allocate around: one sentence, here
    model, task = ctx.model, ctx.task

    def work(job):
        c = None
        if calibrated is not None:
            job.report(0.0, "calibrating…")
            c = calibrated(progress=lambda f, text: job.report(0.0, f"calibrating: {text}"), cancel=job.cancelled)
            if needs.needs_gradients:
                with use.lock:
                    c.gradients(cancel=job.cancelled)
        # the core's one allocate-and-choose workflow (the CLI's `prune --allocate` calls it too)
        with cluster.lock_for(executor, use.lock):
            return allocate_and_choose(model, use.tokenizer, smap, None, round_to, task, c, progress=job.report,
                                       cancel=job.cancelled, plan=plan, executor=executor)

    executor = cluster.for_task(task)
    jobs.launch(JOB, key, f"{len({tuple(p['dims']) for p in plans})} distinct plans of {ctx.name} "
                f"({cluster.where(executor)})", work)


def recommended_plan(check: dict) -> dict | None:
    """The plan the held-out answer recommends ({"name", "ratios", "dims"}), or None without a held-out answer."""
    held = check.get("held_out")
    if not held:
        return None
    if held["recommended"] == "uniform" and held.get("uniform"):
        return {"name": "uniform", "ratios": held["uniform"]["ratios"], "dims": held["uniform"]["dims"]}
    return {"name": held["chosen"]["name"], "ratios": held["chosen"]["ratios"], "dims": held["chosen"]["dims"]}


def _use(ratios, key) -> None:
    """The Use button's callback: the recommended plan into the per-layer inputs, before they are drawn."""
    plan_inputs.fill(ratios, key)
    from ui.shared import state
    state.choose(plan_inputs.MODE, plan_inputs.PER_LAYER)


def _answer(check: dict, ctx: Context) -> None:
    """The held-out answer in a sentence, and the recommendation one click away (the typed plan stays)."""
    held = check.get("held_out")
    if not held:
        return
    st.success(f"**{held['sentence'][0].upper()}{held['sentence'][1:]}.** Measured on {held['measure']}.")
    rec = recommended_plan(check)
    ratios = ", ".join(f"{r:.3g}" for r in rec["ratios"])
    st.button(f"Use the recommended plan ({rec['name']}: {ratios}) in the inputs", key="verify_use",
              on_click=_use, args=(rec["ratios"], ctx.key))


def _versus(c: dict) -> str:
    d = c.get("paired_vs_chosen")
    return "" if d is None else f"{signed(d['delta_log_ppl'])} ± {d['se']:.4f}"


def sentence(text: str) -> str:
    """A clause from the core ("your plan measured …") as a sentence: capital first, full stop last."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _table(check: dict) -> None:
    """st.table, not st.dataframe: every column shown whole (the dataframe cut the wide ones)."""
    rows = check["candidates"]
    metric = "recall" if check["measure"].startswith("recall accuracy") else "ppl"
    unit = "nats/token (perplexity %)" if metric == "ppl" else "drop in recall accuracy"
    st.table(pd.DataFrame({
        "ratios": [", ".join(f"{r:.3g}" for r in c["ratios"]) for c in rows],
        "dk'": [" ".join(map(str, c["dims"])) for c in rows],
        "state bytes": [f"{c['state_bytes']:,}" for c in rows],
        f"predicted, {unit} ± 1σ": [loss_cell(c["predicted_loss"], metric)
                                    + (f" ± {c['predicted_uncertainty']:.4f}" if c["predicted_loss"] is not None
                                       else "") for c in rows],
        f"measured, {unit}": [loss_cell(c["measured_loss"], metric) for c in rows],
        "vs chosen, paired ± SE": [_versus(c) for c in rows],
        "perplexity" if metric == "ppl" else "recall accuracy": [f"{c['measured_value']:.4f}" for c in rows],
        "same dk' as": [c["same_as"] if c["same_as"] != c["name"] else "" for c in rows]},
        index=pd.Index([c["name"] for c in rows], name="plan")))
    yours = f" {sentence(check['yours'])}" if check.get("yours") and check["winner"] != YOURS else ""
    st.caption(f"{check['measure']}; unpruned {check['baseline_value']:.4f}. Loss: Δ log perplexity in nats/token "
               "(perplexity change beside it) or drop in recall accuracy, against the unpruned model on the same "
               "tokens. *vs chosen*: the paired difference over windows ± its standard error. Plans with the same "
               "dk' are measured once (*same dk' as*).")
    st.markdown(f"**Chosen on the choice tokens: {check['winner']}.** {sentence(check['reason'])} Your typed plan "
                f"stays in the inputs.{yours}")
