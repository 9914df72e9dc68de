"""The Sweep page's perplexity sweep: inputs, the background job (points drawn live; Stop ends it between
and inside points; a stopped sweep resumes from the disk cache), the chart, the table and the downloads."""
from __future__ import annotations

import json
from typing import NamedTuple

import streamlit as st

from analysis.data import corpus as data
from analysis.runs import sweep as sweeps
from analysis.errors import AnalysisError
from analysis.evaluate.measure import Evaluation
from analysis.io import point_cache
from analysis.io.points import Executor
from analysis.io.ray_executor import EXECUTORS
from analysis.shrink.prune import usable_strategies
from analysis.shrink.strategies import STRATEGIES
from ui.shared import cluster, jobs, made, notice, shrink, shrink_figures, state, task_inputs
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.explain import explainer
from ui.shared.parse import number_list
from ui.shared.points import merged
from ui.shared.shrink_report import points_csv, points_json, sweep_table

LABELS = {n: s.label for n, s in STRATEGIES.items()}
SWEEP_FORMATS = {"ratio ρ": "{:g}", "perplexity": "{:.3f}", "Δ% vs unpruned": "{:+.1%}", "after recovery": "{:.3f}",
                 "Δ% after recovery": "{:+.1%}", "kernel ms (median)": "{:.3f}", "kernel IQR (ms)": "{:.3f}",
                 "repeats": "{:.0f}"}


def explain() -> None:
    explainer(
        "A **sweep** prunes the model at a series of ratios for each strategy and measures perplexity on the test "
        "split with the stated context and token count; the dashed line is the unpruned model. With **Downstream "
        "accuracy**, every point also gets the accuracy of the chosen lm-evaluation-harness tasks (the harness's own "
        "numbers, ± its standard error as error bars; the dotted line is chance). A **latency sweep** "
        "times the recurrence kernel against the key dimension (fla's Triton kernels on GPU after warm-up, the "
        "project's torch path on CPU), with device, dtype and shape on every number; dotted lines mark the 64-row "
        "tile boundaries of fla's chunk kernel, where the time steps. Every time is the **median of repeated runs** "
        "after warm-up, with its interquartile range as error bars and the repeat count in the table (on CPU at a "
        "fixed thread count, 1 by default); a point whose IQR exceeds 20 % of its median is ringed as **noisy**. "
        "Points appear one by one while the work runs, and the work goes on if you open another page (come back to "
        "watch it); **Stop** takes effect within about a second, inside a point too (a stopped point is not "
        "cached), and finished points are cached on disk, so a stopped sweep resumes where it left off. "
        "Changing the model or settings never starts or resumes anything without a click.",
        [r"\mathrm{PPL} = \exp\Big(-\frac{1}{N}\sum_{t} \log p(x_t \mid x_{<t})\Big),\qquad "
         r"\Delta = \mathrm{PPL}_\rho / \mathrm{PPL}_0 - 1",
         r"d_k' = \lfloor d_k\,(1-\rho) \rfloor,\qquad "
         r"\text{latency}(d_k') = \operatorname{median}_{\text{repeats}}\ t_{\text{kernel}}\ \pm\ \mathrm{IQR},\qquad "
         r"\text{tiles} = \lceil d_k'/64 \rceil"])


def downloads(points: list, settings: dict, stem: str) -> None:
    d1, d2, _ = st.columns([1, 1, 4])
    d1.download_button("Download CSV", points_csv(points), file_name=f"{stem}.csv", mime="text/csv",
                       on_click="ignore", key=f"{stem}_csv")
    d2.download_button("Download JSON", points_json(points, settings), file_name=f"{stem}.json",
                       mime="application/json", on_click="ignore", key=f"{stem}_json")


def styled(frame, formats: dict):
    return frame.style.format({c: f for c, f in formats.items() if c in frame.columns}, na_rep="—").hide(axis="index")


class Inputs(NamedTuple):
    chosen: list
    ratios: list | None
    context: int
    eval_tokens: int
    recover_steps: int
    per_point: bool
    executor: str
    address: str | None
    tasks: object = None   # analysis.evaluate.harness.TaskSettings: lm-evaluation-harness accuracy per point


def inputs(ctx: Context) -> Inputs:
    c1, c2 = st.columns([3, 2])
    usable, unusable = usable_strategies(ctx.model)  # PCA is not offered where key channels have their own decay
    chosen = state.field(c1.multiselect, "Strategies", "sweep_strategies", ["random", "l1", "wanda"],
                         options=usable, format_func=LABELS.get,
                         help=f"Not offered for {ctx.info.label}: {', '.join(map(LABELS.get, unusable))} (it mixes "
                              "key channels, and each key channel here has its own decay)." if unusable else None)
    ratio_text = state.field(c2.text_input, "Ratios ρ (comma-separated)", "sweep_ratios", "0.25, 0.5, 0.75")
    s1, s2, s4, s5 = st.columns(4)
    context = int(state.field(s1.number_input, "Context (tokens)", "eval_context", 256, 16, 4096, step=64))
    eval_tokens = int(state.field(s2.number_input, "Tokens to score", "eval_tokens", 4096, 64, 10**6, step=1024))
    recover = int(state.field(s4.number_input, "Recovery steps per point", "sweep_recover", 0, 0, 10_000, step=10))
    per_point = state.field(s5.checkbox, "Time the kernel per point", "sweep_latency", False)
    e1, e2, _ = st.columns([1, 2, 2])
    server = cluster.executor()  # the server's own (started with a cluster address: Ray there by default)
    executor = state.field(e1.selectbox, "Executor", "sweep_executor", server.kind, options=EXECUTORS,
                           help="in-process: one point after another in this server. ray: one Ray task per point, "
                                "on a local Ray with this machine's cores, or on the cluster at the address given; "
                                "the same numbers and the same cache either way.")
    address = state.field(e2.text_input, "Ray cluster address (empty: a local Ray)", "sweep_address",
                          server.address or "",
                          disabled=executor != "ray", placeholder="host:6379, ray://host:10001 or auto").strip()
    try:  # not guard(): a typo here must not hide the latency section below
        ratios = number_list(ratio_text, "pruning ratios", 0.0, 1.0)
    except AnalysisError as exc:
        st.error(str(exc))
        ratios = None
    return Inputs(chosen, ratios, context, eval_tokens, recover, per_point, executor,
                  (address or None) if executor == "ray" else None, task_inputs.controls(ctx, "sweep"))


def section(ctx: Context) -> None:
    st.header("Perplexity vs pruning ratio")
    if ctx.task is not None:
        st.info("The sweep scores text perplexity, and this recall model has no tokenizer; use the Prune page for "
                "its recall accuracy. The latency sweep below works for every model.")
        return
    calib = shrink.calibration_controls(ctx)  # the one control the Shrink pages share (one cached calibration)
    inp = inputs(ctx)
    if not inp.chosen:
        st.info("Pick at least one strategy to sweep.")
        return
    if not inp.ratios:
        return
    settings = {"model": ctx.name, "strategies": inp.chosen, "ratios": inp.ratios, "split": "test",
                "context": inp.context, "eval_tokens": inp.eval_tokens, "calib_sequences": calib.sequences,
                "calib_tokens": calib.tokens, "recover_steps": inp.recover_steps, "latency": inp.per_point,
                "seed": calib.seed, "device": ctx.key.device, "dtype": ctx.key.dtype,
                "tasks": inp.tasks.record() if inp.tasks else None}
    key = json.dumps({**settings, "path": ctx.key.path}, sort_keys=True)  # the job belongs to these inputs
    points = made.sweep_points(key)
    expected = 1 + len(inp.chosen) * len(inp.ratios)
    label = "Run sweep" if not points else "Resume sweep" if len(points) < expected else "Run again (cached)"
    if jobs.controls("sweep", key, label):
        with guard():
            _launch(ctx, inp, calib, points, expected, key)
    other = jobs.busy_elsewhere("sweep", key)
    if other is not None:
        st.info(jobs.other_inputs_note(other))
    job = jobs.mine("sweep", key)
    _follow(job, points)
    base = points[0] if points else {"dataset": data.dataset_label("test"), "context": inp.context,
                                      "stride": inp.context, "tokens": inp.eval_tokens, "device": ctx.key.device,
                                      "dtype": ctx.key.dtype}
    st.caption(f"{ctx.name} · {base['dataset']} · context {base['context']}, stride {base['stride']}, "
               f"{'' if points else 'up to '}{base['tokens']:,} scored tokens · calibration {calib.sequences} "
               f"train-split sequences × {calib.tokens} tokens (seed {calib.seed}) · device {base['device']} · dtype "
               f"{base['dtype']} · Δ% = perplexity / unpruned − 1 · results cached in {point_cache.CACHE_DIR}")
    if points:
        if len(points) < expected and not (job is not None and job.running):
            st.info(f"Stopped after {len(points)} of {expected} points; **Resume sweep** continues from the cache.")
        downloads(points, settings, "sweep")


def _launch(ctx: Context, inp: Inputs, calib: shrink.CalibrationSettings, points: list, expected: int, key: str) -> None:
    """Resolved here, in the script run: the job's thread gets plain objects and never calls Streamlit."""
    use = shrink.using(ctx.key)
    shared = shrink.calibration.bind(ctx.key, calib, _using=use)  # the calibration Importance and Prune use

    def work(job):
        if inp.recover_steps and use.tokenizer is not None:
            # the recovery's training text, encoded once per process (seconds to tens of seconds, with no cancel
            # check inside): here, before the points and outside the compute slot (tokenizing never touches the
            # shared model), so it neither holds other sessions' pages nor sits unstoppable inside a point
            job.report(0.0, "encoding the training text for the recovery steps (once per server)…")
            data.encoded_split("train", use.tokenizer)
        calibration = lambda: shared(progress=lambda _f, text: job.report(  # noqa: E731  (reports its passes)
            len(points) / expected, f"{len(points)} of {expected} points; calibration: {text}"), cancel=job.cancelled)
        evaluation = Evaluation("test", inp.context, inp.eval_tokens, latency=inp.per_point, tasks=inp.tasks)
        gen = sweeps.sweep(use.model, use.tokenizer, inp.chosen, inp.ratios, evaluation, calib, inp.recover_steps,
                           calibration=calibration, executor=Executor(inp.executor, inp.address),
                           cancel=job.cancelled)
        job.report(0.0, f"0 of {expected} points (unpruned baseline first)")
        for point in shrink.locked(gen, use.lock):
            merged(points, point, lambda a, b: (a["strategy"], a["ratio"]) == (b["strategy"], b["ratio"]))
            job.items = points
            job.report(len(points) / expected, f"{len(points)} of {expected} points")

    jobs.launch("sweep", key, f"{ctx.name}, {', '.join(LABELS[c] for c in inp.chosen)} at ρ = "
                              f"{', '.join(f'{r:g}' for r in inp.ratios)}", work)


def _follow(job, points: list) -> None:
    """Draw the chart and table now, and again at each new point while the job runs (Stop ends it)."""
    progress, chart, noticed, table = st.empty(), st.empty(), st.empty(), st.empty()
    drawn = [0]

    def draw(job=None):
        base = next((p for p in points if p["strategy"] == "unpruned"), None)
        y_title = (f"perplexity (test split, context {base['context']}, {base['tokens']:,} tokens)" if base
                   else "perplexity (test split)")
        drawn[0] += 1
        if job is not None and job.running:
            progress.progress(job.fraction, text=f"{job.text} (unpruned baseline first)")
        if not points:  # a sentence, not blank axes, until the first point
            chart.info("No sweep points for these settings yet: press **Run sweep** to measure the unpruned model, "
                       "then each strategy at each ratio; the chart fills in point by point.")
            return
        with chart.container():
            tasks = list(dict.fromkeys(n for p in points for n in p.get("tasks") or {}))
            left, *right = st.columns(2 if tasks else 1)
            left.plotly_chart(shrink_figures.sweep_figure(points, LABELS, "Perplexity vs pruning ratio", y_title),
                              key=f"sweep_chart_{drawn[0]}")
            for i, task in enumerate(tasks):  # accuracy vs ratio beside perplexity, one chart per task
                (right[0] if i % 2 == 0 else left).plotly_chart(shrink_figures.accuracy_figure(points, LABELS, task),
                                                                  key=f"sweep_task_{task}_{drawn[0]}")
        frame = sweep_table(points, LABELS)
        table.table(styled(frame, {**SWEEP_FORMATS, **{c: "{:.3f}" for c in frame.columns if c not in SWEEP_FORMATS
                                                        and frame[c].dtype.kind == "f"}}))
        noticed.caption(notice.sweep(points, LABELS))

    draw()
    if jobs.unsettled(job):
        jobs.follow(job, draw)
        st.rerun()  # finished or stopped: redraw the buttons and captions for the new results
    if job is not None and job.error:
        st.error(job.error)
