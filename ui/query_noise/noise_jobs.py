"""The Query noise page's two long works, run as background jobs (ui.shared.jobs) like the other pages' long work:
the Monte Carlo of the retrieval error (each probe with the raw and the re-normalised query, per model) and the recall
accuracy against the SNR (clean queries, then each SNR). Progress while they run, Stop, and the end of the session
end them; each step is memoized (ui.shared.cache over ui.shared.memo), so a finished run shows on every rerun and
on coming back to the same settings, a stopped one resumes where it stopped, and the numbers are the core's, seed 0.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import streamlit as st

from ui.shared import cache, figures, jobs, state
from ui.shared.batches import recall_label
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.labels import Provenance, caption

MC, RECALL = "noise_mc", "recall_noise"


class Step(NamedTuple):
    text: str                # what the progress bar says while the step runs
    run: Callable            # the memoized step bound in the script run (memo's bind): the job calls run(cancel=...)
    stored: bool             # computed already (the step is a cache hit)


def stepwise(name: str, key: str, run_label: str, what: str, unit: str, steps: list[Step], label: str,
             container=st) -> bool:
    """Run and Stop (in `container`) for the job `name` that computes `steps` in order, its progress while it runs,
    and one sentence when it stopped or failed. True once every step is stored (the caller reads them: cache hits)."""
    stored = sum(step.stored for step in steps)
    done = stored == len(steps)
    if jobs.controls(name, key, "Run again (cached)" if done else run_label, container=container,
                     run_key=f"{name}_run"):
        with guard():
            jobs.launch(name, key, label, lambda job: _run_steps(job, steps, what))
    other = jobs.busy_elsewhere(name, key)
    if other is not None:
        st.info(jobs.other_inputs_note(other))
    job = jobs.mine(name, key)
    if jobs.unsettled(job):
        jobs.follow_in_status(job, f"{what}: {label}…")
    if job is not None and job.error:
        st.error(job.error)
    elif job is not None and job.state == "stopped" and not done:
        st.info(f"{what} stopped after {stored} of {len(steps)} {unit}; press **{run_label}** to finish it "
                "(the finished ones are kept).")
    if done:
        took = f" in {job.result:.1f} s" if job is not None and job.state == "done" else ""
        st.progress(1.0, text=f"{what}: {len(steps)} of {len(steps)} {unit} done{took} (cached for these settings)")
    return done


def _run_steps(job: jobs.Job, steps: list[Step], what: str) -> float:
    """The job's work: each step in order (a stored one is a cache hit), with its progress; the seconds it took."""
    start = time.perf_counter()
    for n, step in enumerate(steps):
        job.report(n / len(steps), f"{what} step {n + 1} of {len(steps)}: {step.text}…")
        step.run(cancel=job.cancelled)
    return time.perf_counter() - start


def monte_carlo(ctx: Context, sides: tuple, stride: int, layer: int, head: int, snr: tuple, probes: list,
                samples: int, names: dict, sequences: int) -> list[dict]:
    """The Monte Carlo's button, job and progress; per side {(probe, re-normalised): per-sequence figures}, empty
    until every step is stored."""
    pair = len(sides) > 1
    args = lambda i, p, renorm: (ctx.key, ctx.spec, stride, layer, head, snr, p, samples, renorm,  # noqa: E731
                                 sides[i].id)
    with guard():
        inputs = [cache.head_inputs(ctx.key, ctx.spec, stride, layer, head, s.id, s.model) for s in sides]
    todo = [(i, p, renorm) for i in range(len(sides)) for p in probes[i] for renorm in (False, True)]
    steps = [Step(f"{names[p]}, {'re-normalised' if renorm else 'raw'} query"
                  + (f", {sides[i].role}" if pair else ""), cache.noise_mc_step.bind(*args(i, p, renorm), _inputs=inputs[i]),
                  cache.noise_mc_step.is_cached(*args(i, p, renorm))) for i, p, renorm in todo]
    key = repr((ctx.key, ctx.spec, stride, layer, head, snr, tuple(probes), samples, tuple(s.id for s in sides)))
    left, right = st.columns([1, 3])
    done = stepwise(MC, key, "Run Monte Carlo", "Monte Carlo", "steps", steps,
                    f"layer {layer}, head {head}, {samples} samples", container=left)
    right.caption(f"{len(steps)} steps: each probe with the raw and the re-normalised query"
                  + (", for both models" if pair else "") + f", {samples} noise samples per key and SNR, {len(snr)} "
                  f"SNRs, {sequences} sequences." + ("" if done else " Until it runs, the plot shows the predictions only."))
    mc = [{} for _ in sides]
    for i, p, renorm in todo if done else ():
        mc[i][p, renorm] = cache.noise_mc_step(*args(i, p, renorm), _inputs=inputs[i])
    return mc


def recall_section(ctx: Context, snr: tuple) -> None:
    """Recall accuracy of a recall-trained model with noisy queries (every layer), against the SNR."""
    st.subheader("Recall accuracy under query noise")
    st.markdown("Gaussian noise at the given SNR is added to every layer's query (the output of its short convolution, "
                "before the kernel's l2 norm) at the positions where the model must name a queried value; "
                "the same sequences and noise draws are used at every SNR (`analysis.evaluate.recall_noise`).")
    n_eval = int(state.field(st.number_input, "Evaluation sequences", "recall_eval", 256, 16, 2048, step=16))
    points = [None, *snr]
    shared = {"_model": ctx.model, "_lock": cache.compute_lock()}
    steps = [Step("clean queries" if x is None else f"SNR {x:g} dB",
                  cache.recall_noise_point.bind(ctx.key, ctx.task, x, n_eval, **shared),
                  cache.recall_noise_point.is_cached(ctx.key, ctx.task, x, n_eval)) for x in points]
    if not stepwise(RECALL, repr((ctx.key, ctx.task, snr, n_eval)), "Run recall vs SNR", "Recall", "points", steps,
                    f"{ctx.name}, {n_eval} sequences"):
        st.caption(f"{len(points)} steps (clean queries, then each SNR), {n_eval} sequences each; it runs only "
                   "when asked.")
        return
    results = {x: cache.recall_noise_point(ctx.key, ctx.task, x, n_eval, **shared) for x in points}
    clean = results[None]["accuracy"]
    st.plotly_chart(figures.recall_accuracy_vs_snr(list(snr), [results[x]["accuracy"] for x in snr], clean,
                                                   "Recall accuracy vs query SNR", chance=1 / ctx.task.n_values),
                    key="recall_vs_snr")
    rprov = Provenance(ctx.name, recall_label(ctx.task, 1234), ctx.task.seq_len, n_eval, ctx.key.device,
                       ctx.key.dtype)
    st.caption(caption(rprov, f"{results[None]['queries']} scored queries; noise seed 0; all layers"))
