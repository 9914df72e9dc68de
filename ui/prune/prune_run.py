"""The Prune page's work: the prune job (calibrate, prune a new model, measure before and after), the
recovery job, and following them. What a job's thread uses is resolved here in the script run; the thread
never calls Streamlit."""
from __future__ import annotations

import json
import uuid

import streamlit as st

from analysis.archs import adapter_for
from analysis.io.writes import output_root
from analysis.shrink.prune_run import PruneRun
from analysis.shrink.prune_workflow import Evaluation, prune_and_measure, recover_and_measure
from analysis.shrink.recovery import METHODS, RecoverySettings
from analysis.io.recovery_state import has_state
from analysis.shrink.heads.prune import HeadPlan
from analysis.shrink.heads.strategies import get_head_strategy
from analysis.shrink.strategies import STRATEGIES
from ui.shared import jobs, made, notice, shrink, state
from ui.shared.context import Context
from ui.shared.labels import readout_label
from ui.shared.shrink_report import before_after_table, kernel_label, recovery_verdict
from ui.prune import plan_history
from ui.prune.prune_form import Choices
from ui.prune.recovery_view import METHOD_LABELS, loss_figure


def prune_job(ctx: Context, choice: Choices, planned: list[int], settings: shrink.CalibrationSettings, ev: Evaluation,
              tok, heads: list[int] | None = None, refused: bool = False) -> None:
    """Prune and Stop; a click starts the job for these inputs; the page follows it and takes its result.
    heads: value heads kept per layer (a Heads or Both plan, by choice.head_strategy). refused: Prune is off (a
    plan that prunes nothing: analysis.shrink.prune_run.unchanged, the CLI's refusal)."""
    key = json.dumps({"model": list(ctx.key), "strategy": choice.strategy, "dims": planned,
                      "calibration": list(settings), "context": ev.context, "tokens": ev.max_tokens,
                      "pairs": ev.recall_pairs,
                      "recall": ev.recall_sequences, "timed": ev.latency, "rescale": choice.rescale,
                      "tasks": ev.tasks and ev.tasks.record(), "heads": heads, "head_strategy": choice.head_strategy})
    head_plan = HeadPlan(choice.head_strategy, tuple(heads)) if heads is not None else None
    if jobs.controls("prune", key, "Prune", disabled=refused, run_key="prune_run"):
        model, mkey, use = ctx.model, ctx.key, shrink.using(ctx.key)
        needs = STRATEGIES[choice.strategy] if choice.strategy else get_head_strategy(choice.head_strategy)
        calibrated = shrink.calibration.bind(mkey, settings, _using=use)
        measured_before = shrink.baseline.bind(mkey, ev, _using=use)

        def work(job):
            calib = None
            if needs.needs_calibration or (head_plan and get_head_strategy(head_plan.strategy).needs_calibration):
                what = f"calibrating on {settings.sequences} sequences × {settings.tokens} tokens"
                job.report(0.02, f"{what}…")
                calib = calibrated(progress=lambda f, text: job.report(0.02 + 0.13 * f, f"{what}: {text}"),
                                   cancel=job.cancelled)
                if getattr(needs, "needs_gradients", False):
                    job.report(0.15, "backward pass: gradients of the query/key projections for the Taylor scores…")
                    with use.lock:
                        calib.gradients(cancel=job.cancelled)  # kept on the shared calibration, as the memo did
            run = prune_and_measure(model, tok, choice.strategy, planned, calib, ev, seed=settings.seed,
                                    rescale=choice.rescale, before=measured_before, lock=use.lock,
                                    cancel=job.cancelled, progress=lambda f, text: job.report(0.25 + 0.75 * f, text),
                                    heads=head_plan)
            result, before, after = run.pruned, run.before, run.after
            saved = PruneRun.of(result, model, mkey.path, choice.ratios or choice.ratio, before, after, ev,
                                calib and calib.label)  # what Save and Download write
            return {"key": mkey, "id": uuid.uuid4().hex, "result": result, "prune_run": saved,
                    "before": before, "after": after, "recovered": None, "calib": calib and calib.label}

        what = f"{needs.label} to dk' = {planned}" if choice.strategy else "no key channels removed"
        if head_plan:
            what += f", {get_head_strategy(head_plan.strategy).label} to {list(head_plan.counts)} heads"
        jobs.launch("prune", key, f"{ctx.name} with {what}", work)
    job = jobs.get("prune")
    if job is not None and job.state == "done" and not job.taken:
        made.keep_pruned(job.result)
        job.taken = True
        plan_history.record_prune(job.result["key"], job.result)
    if jobs.unsettled(job):
        other = ("Started for other settings than the ones above; it goes on, and its result appears here.",)
        jobs.follow_in_status(job, f"Pruning {job.label}…", (other if job.key != key else ()) + (
            "You can open other pages meanwhile: the prune goes on, and this page shows it when you return.",))
    if job is not None and job.state == "failed":
        st.error(job.error)
    elif job is not None and job.state == "stopped":
        st.info(f"The prune of {job.label} was stopped before it finished; press **Prune** to run it again.")


def take_recovery(run: dict) -> dict | None:
    """A finished recovery of this prune run, moved into it (ui.shared.made), and a point in the history of
    plans (once, whichever page took it: a "Compare with" picker takes it without recording it)."""
    recovered = made.take_recovery(run)
    if recovered is not None:
        plan_history.record_recovery(run["key"], run)
    return recovered


def recovered_entry(run_id: str, done, settings: RecoverySettings) -> dict:
    """What a finished recovery leaves in the prune run (run["recovered"]): the recovered model (a new one, never
    shared), its measurement and how it was trained; `id` names it apart from the plain pruned model."""
    rec = done.recovery
    return {"for": run_id, "id": uuid.uuid4().hex, "model": rec.model, "measure": done.measured,
            "steps": settings.steps, "lr": settings.learning_rate, "final_loss": rec.final_loss,
            "method": settings.method, "recovery": rec.metadata(), "history": rec.history,
            "validation": rec.validation}


def comparison(ctx: Context, run: dict) -> None:
    """The before/after table (and after recovery)."""
    take_recovery(run)
    result = run["result"]
    heads = result.info.get("heads")
    st.subheader(f"Before and after: {shrink.strategy_label(result.strategy)}, dk {result.original_dims} → "
                 f"{result.dims}" + (f"; {heads['label']}, value heads {[c[1] for c in heads['head_counts_before']]} "
                                     f"→ {[c[1] for c in heads['head_counts']]}" if heads else ""))
    columns = {"before": run["before"], "after pruning": run["after"]}
    methods = {"before": "unpruned", "after pruning": shrink.strategy_label(result.strategy)}
    if run["recovered"]:
        rec = run["recovered"]
        columns["after recovery"] = rec["measure"]
        method = rec.get("method") or "qk"
        methods["after recovery"] = f"{method} ({METHOD_LABELS.get(method, method)}), {rec['steps']} steps"
    st.table(before_after_table(columns, methods))
    notes = [f"{ctx.name} · device {ctx.key.device} · dtype {ctx.key.dtype} · {readout_label(result.info['rescale'], adapter_for(ctx.model).readout_scaled)}",
             "Δ and %: change from the unpruned model ("
             + ("higher recall accuracy and lower kernel time are better)" if ctx.task is not None else
                "lower perplexity and kernel time are better)")]
    if "kernel" in run["after"]:
        notes.append(f"kernel timing: {kernel_label(run['after']['kernel'])}; a Δ inside the larger IQR is noise")
    if "tasks" in run["after"]:
        notes.append(f"task accuracy: {run['after']['harness']}, ± its standard error; a Δ within twice the "
                     "combined standard error is noise")
    notes.append(f"calibration: {run['calib'] or 'none (data-free strategy)'}")
    st.caption(" · ".join(notes))


class LockedTeacher:
    """The shared unpruned model as lora-kd's teacher: each forward holds the compute lock (shared models run
    one forward at a time, so another session's calibration hooks never see the teacher's batches)."""

    def __init__(self, model, lock):
        self.model, self.lock, self.config = model, lock, model.config

    def __call__(self, *args, **kwargs):
        with self.lock:
            return self.model(*args, **kwargs)


def recovery(ctx: Context, run: dict, ev: Evaluation, seed: int, tok) -> None:
    st.subheader("Recovery fine-tune (optional)")
    if ctx.task is not None:
        st.info("Recovery trains on text, and this recall model has no tokenizer; it is offered for language models.")
        return
    r0, r1, r2, r3, r4 = st.columns(5)
    method = state.field(r0.selectbox, "Method", "recover_method", "lora-kd", options=METHODS,
                         format_func=METHOD_LABELS.get)
    steps = int(state.field(r1.number_input, "Steps", "recover_steps", 20, 1, 10_000, step=10))
    lr = float(state.field(r2.number_input, "Learning rate", "recover_lr", 1e-4, 1e-6, 1e-1, format="%.0e"))
    batch = int(state.field(r3.number_input, "Batch (sequences)", "recover_batch", 8, 1, 64, step=1))
    seq_len = int(state.field(r4.number_input, "Tokens per sequence", "recover_seq", 256, 16, 2048, step=64))
    q1, q2, q3, q4, q5 = st.columns(5)
    rank = int(state.field(q1.number_input, "LoRA rank", "recover_rank", 32, 1, 4096, step=8))
    alpha = float(state.field(q2.number_input, "LoRA α", "recover_alpha", 64.0, 0.01, 1e4))
    temperature = float(state.field(q3.number_input, "KD temperature T", "recover_kd_t", 2.0, 0.05, 100.0))
    kd_weight = float(state.field(q4.number_input, "KD weight", "recover_kd_w", 1.0, 0.0, 100.0))
    eval_every = int(state.field(q5.number_input, "Validate every (steps)", "recover_eval_every", 10, 1, 10_000))
    st.caption(f"{METHOD_LABELS[method]}; AdamW, cosine schedule to 0.1 × lr, clip 1.0, on train-split windows. "
               "Validation-split perplexity at step 0 (the pruned model) and every few steps; the best state is "
               "kept, so recovery never returns a model worse on validation. The test perplexity is then measured "
               "with the settings above.")
    settings = RecoverySettings(method=method, steps=steps, lr=lr, batch=batch, seq_len=seq_len, rank=rank,
                                alpha=alpha, temperature=temperature, kd_weight=kd_weight, eval_every=eval_every,
                                seed=seed)
    key = json.dumps({"prune": run["id"], **settings.record(), "context": ev.context, "tokens": ev.max_tokens})
    state_dir = output_root() / "recovery-state" / run["id"]  # where Stop saves a resumable state
    resume = False
    previous = jobs.get(made.RECOVERY)
    if has_state(state_dir) and not (previous is not None and previous.running):
        st.info("A stopped recovery of this pruned model is saved: **Resume** continues it (keep the settings it "
                "was stopped with); **Run recovery** starts over and discards it.")
        resume = st.button("Resume", key="recover_resume")
    if jobs.controls(made.RECOVERY, key, "Run recovery", run_key="recover_run") or resume:
        pruned_model, run_id = run["result"].model, run["id"]
        teacher = LockedTeacher(ctx.model, shrink.using(ctx.key).lock)

        def work(job):
            def progress(event):
                job.items.append(event)
                if event["kind"] == "train":
                    job.report(0.8 * event["step"] / event["steps"],
                               f"step {event['step']}/{event['steps']}, loss {event['loss']:.3f}")
            done = recover_and_measure(pruned_model, tok, settings, ev, teacher=teacher, cancel=job.cancelled,
                                       progress=progress, state_dir=state_dir, resume=resume,
                                       measure_progress=lambda f: job.report(0.8 + 0.2 * f,
                                                                             f"perplexity after recovery: {f:.0%}"))
            return recovered_entry(run_id, done, settings)

        jobs.launch(made.RECOVERY, key, f"{METHOD_LABELS[method]}: {steps} steps at learning rate {lr:g}", work)
    job = jobs.get(made.RECOVERY)
    if jobs.unsettled(job):
        with st.status(f"Recovery: {job.label}…", expanded=True):
            bar, chart, drawn = st.progress(0.0), st.empty(), [0]

            def draw(j):
                bar.progress(j.fraction, text=j.text)
                drawn[0] += 1  # each redraw is a new element in this run: a new key
                chart.plotly_chart(loss_figure(list(j.items)), key=f"recovery_curve_{drawn[0]}")
            jobs.follow(job, draw)
        st.rerun()  # redraw the table with the new column
    if job is not None and job.state == "failed":
        st.error(job.error)
    elif job is not None and job.state == "stopped" and has_state(state_dir):
        st.info("The recovery was stopped after a finished step; its state is saved, so **Resume** continues it.")
    if run["recovered"]:
        rec = run["recovered"]
        meta = rec.get("recovery") or {}
        verdict = recovery_verdict(run["after"], rec["measure"], meta.get("validation_change"))
        kept = (f"; kept step {meta['kept_step']}, validation perplexity {meta['kept_validation_perplexity']:.2f} "
                f"against {meta['start_validation_perplexity']:.2f} at step 0, {meta['validation']}") if meta else ""
        said = (f"{METHOD_LABELS.get(rec.get('method'), 'q/k rows')}, {rec['steps']} recovery steps (final training "
                f"loss {rec['final_loss']:.3f}{kept}): {verdict['text']}. "
                "Save and download below use the better of the two by default; you can pick the other.")
        {"better": st.success, "worse": st.warning}.get(verdict["verdict"], st.info)(said)
        if rec.get("history"):
            st.plotly_chart(loss_figure(rec["history"], rec["validation"]), key="recovery_curve_done")
            st.caption(notice.recovery(rec["history"], rec["validation"], meta.get("validation_change")))
