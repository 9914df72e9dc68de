"""Sweep & latency: perplexity vs pruning ratio per strategy, and kernel latency vs key dim, drawn live."""
import json

import streamlit as st

from analysis import data
from analysis import latency as latencies
from analysis import sweep as sweeps
from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.ray_executor import EXECUTORS
from analysis.strategies import STRATEGIES
from ui import cache, frame, jobs, shrink, shrink_figures, state
from ui.context import current
from ui.errors import guard
from ui.explain import explainer
from ui.parse import number_list
from ui.shrink_report import latency_table, points_csv, points_json, sweep_table

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Sweep & latency")
explainer(
    "A **sweep** prunes the model at a series of ratios for each strategy and measures perplexity on the test "
    "split with the stated context and token count; the dashed line is the unpruned model. A **latency sweep** "
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

ctx = current()
labels = {n: s.label for n, s in STRATEGIES.items()}


def merged(points: list, point: dict, same) -> None:
    """Replace the point with the same identity (a resumed sweep yields finished points again) or append it."""
    for i, old in enumerate(points):
        if same(old, point):
            points[i] = point
            return
    points.append(point)


def downloads(points: list, settings: dict, stem: str) -> None:
    d1, d2, _ = st.columns([1, 1, 4])
    d1.download_button("Download CSV", points_csv(points), file_name=f"{stem}.csv", mime="text/csv",
                       on_click="ignore", key=f"{stem}_csv")
    d2.download_button("Download JSON", points_json(points, settings), file_name=f"{stem}.json",
                       mime="application/json", on_click="ignore", key=f"{stem}_json")


SWEEP_FORMATS = {"ratio ρ": "{:g}", "perplexity": "{:.3f}", "Δ% vs unpruned": "{:+.1%}", "after recovery": "{:.3f}",
                 "Δ% after recovery": "{:+.1%}", "kernel ms (median)": "{:.3f}", "kernel IQR (ms)": "{:.3f}",
                 "repeats": "{:.0f}"}
LATENCY_FORMATS = {"median (ms)": "{:.3f}", "IQR (ms)": "{:.3f}", "min (ms)": "{:.3f}", "max (ms)": "{:.3f}"}


def styled(frame, formats: dict):
    return frame.style.format({c: f for c, f in formats.items() if c in frame.columns}, na_rep="—").hide(axis="index")


st.header("Perplexity vs pruning ratio")
if ctx.task is not None:
    st.info("The sweep scores text perplexity, and this recall model has no tokenizer; use the Prune page for "
            "its recall accuracy. The latency sweep below works for every model.")
else:
    names = list(STRATEGIES)
    c1, c2 = st.columns([3, 2])
    chosen = c1.multiselect("Strategies", names, format_func=labels.get,
                            key=state.remembered("sweep_strategies", ["random", "l1", "wanda"], names))
    state.remember("sweep_strategies")
    ratio_text = c2.text_input("Ratios ρ (comma-separated)", key=state.remembered("sweep_ratios", "0.25, 0.5, 0.75"))
    state.remember("sweep_ratios")
    s1, s2, s3, s4, s5 = st.columns(5)
    context = int(s1.number_input("Context (tokens)", 16, 4096, key=state.remembered("eval_context", 256), step=64))
    state.remember("eval_context")
    eval_tokens = int(s2.number_input("Tokens to score", 64, 10**6, key=state.remembered("eval_tokens", 4096), step=1024))
    state.remember("eval_tokens")
    calib_n = int(s3.number_input("Calibration sequences", 1, 256, key=state.remembered("calib_sequences", 16), step=1))
    state.remember("calib_sequences")
    recover_steps = int(s4.number_input("Recovery steps per point", 0, 10_000, key=state.remembered("sweep_recover", 0),
                                        step=10))
    state.remember("sweep_recover")
    per_point = s5.checkbox("Time the kernel per point", key=state.remembered("sweep_latency", False))
    state.remember("sweep_latency")
    e1, e2, _ = st.columns([1, 2, 2])
    executor = e1.selectbox("Executor", EXECUTORS, key=state.remembered("sweep_executor", "in-process", EXECUTORS),
                            help="in-process: one point after another in this server. ray: one Ray task per point, "
                                 "on a local Ray with this machine's cores, or on the cluster at the address given; "
                                 "the same numbers and the same cache either way.")
    state.remember("sweep_executor")
    address = e2.text_input("Ray cluster address (empty: a local Ray)", key=state.remembered("sweep_address", ""),
                            disabled=executor != "ray", placeholder="host:6379, ray://host:10001 or auto").strip()
    state.remember("sweep_address")
    try:  # not guard(): a typo here must not hide the latency section below
        ratios = number_list(ratio_text, "pruning ratios", 0.0, 1.0)
    except AnalysisError as exc:
        st.error(str(exc))
        ratios = None
    if not chosen:
        st.info("Pick at least one strategy to sweep.")
    elif ratios:
        settings = {"model": ctx.name, "strategies": chosen, "ratios": ratios, "split": "test", "context": context,
                    "eval_tokens": eval_tokens, "calib_sequences": calib_n, "recover_steps": recover_steps,
                    "latency": per_point, "seed": 0, "device": ctx.key.device, "dtype": ctx.key.dtype}
        key = json.dumps({**settings, "path": ctx.key.path}, sort_keys=True)  # the job belongs to these inputs
        points = st.session_state.setdefault("sweep_results", {}).setdefault(key, [])
        expected = 1 + len(chosen) * len(ratios)
        label = "Run sweep" if not points else "Resume sweep" if len(points) < expected else "Run again (cached)"
        if jobs.controls("sweep", key, label):
            with guard():
                # resolved here, in the script run: the job's thread gets plain objects and never calls Streamlit
                tok, model, lock = cache.tokenizer(ctx.key.path), ctx.model, cache.compute_lock()
                shared = shrink.shared_calibration(ctx.key, calib_n)  # the calibration Importance and Prune use

                def work(job):
                    # its first computation reports its passes here
                    calibration = lambda: shared(progress=lambda _f, text: job.report(  # noqa: E731
                        len(points) / expected, f"{len(points)} of {expected} points; calibration: {text}"),
                        cancel=job.cancelled)
                    gen = sweeps.sweep(model, tok, chosen, ratios, split="test", context=context,
                                       eval_tokens=eval_tokens, recover_steps=recover_steps, calib_sequences=calib_n,
                                       calibration=calibration, latency=per_point, executor=executor,
                                       address=(address or None) if executor == "ray" else None, cancel=job.cancelled)
                    job.report(0.0, f"0 of {expected} points (unpruned baseline first)")
                    for point in shrink.locked(gen, lock):
                        merged(points, point, lambda a, b: (a["strategy"], a["ratio"]) == (b["strategy"], b["ratio"]))
                        job.items = points
                        job.report(len(points) / expected, f"{len(points)} of {expected} points")

                jobs.launch("sweep", key, f"{ctx.name}, {', '.join(labels[c] for c in chosen)} at ρ = "
                                          f"{', '.join(f'{r:g}' for r in ratios)}", work)
        other = jobs.busy_elsewhere("sweep", key)
        if other is not None:
            st.info(jobs.other_inputs_note(other))
        job = jobs.mine("sweep", key)
        progress = st.empty()
        chart = st.empty()
        table = st.empty()
        drawn = [0]

        def draw(job=None):
            base = next((p for p in points if p["strategy"] == "unpruned"), None)
            y_title = (f"perplexity (test split, context {base['context']}, {base['tokens']:,} tokens)" if base
                       else "perplexity (test split)")
            drawn[0] += 1
            if job is not None and job.running:
                progress.progress(job.fraction, text=f"{job.text} (unpruned baseline first)")
            chart.plotly_chart(shrink_figures.sweep_figure(points, labels, "Perplexity vs pruning ratio", y_title),
                               key=f"sweep_chart_{drawn[0]}")
            if points:
                table.table(styled(sweep_table(points, labels), SWEEP_FORMATS))

        draw()
        if jobs.unsettled(job):
            jobs.follow(job, draw)
            st.rerun()  # finished or stopped: redraw the buttons and captions for the new results
        if job is not None and job.error:
            st.error(job.error)
        base = points[0] if points else {"dataset": data.dataset_label("test"), "context": context, "stride": context,
                                          "tokens": eval_tokens, "device": ctx.key.device, "dtype": ctx.key.dtype}
        st.caption(f"{ctx.name} · {base['dataset']} · context {base['context']}, stride {base['stride']}, "
                   f"{'' if points else 'up to '}{base['tokens']:,} scored tokens · calibration {calib_n} train-split "
                   f"sequences × 256 tokens · device {base['device']} · dtype {base['dtype']} · "
                   f"Δ% = perplexity / unpruned − 1 · results cached in {point_cache.CACHE_DIR}")
        if points:
            if len(points) < expected and not (job is not None and job.running):
                st.info(f"Stopped after {len(points)} of {expected} points; **Resume sweep** continues from the cache.")
            downloads(points, settings, "sweep")

st.header("Kernel latency vs key dim")
info = ctx.info
kernel = info.kernel
spec = latencies.kernel_spec(kernel)
kernel_label = spec.label
l1, l2, l3, l4 = st.columns([3, 1, 1, 1])
dim_text = l1.text_input("Key dims dk (comma-separated)", key=state.remembered("latency_dims", "16, 32, 48, 64, 96, 128"))
state.remember("latency_dims")
batch = int(l2.number_input("Batch", 1, 64, key=state.remembered("latency_batch", 2), step=1))
state.remember("latency_batch")
tokens = int(l3.number_input("Tokens", 16, 16384, key=state.remembered("latency_tokens", 512), step=256))
state.remember("latency_tokens")
threads = int(l4.number_input("CPU threads", 1, 256, key=state.remembered("latency_threads", latencies.CPU_THREADS),
                              step=1, disabled=ctx.key.device != "cpu",
                              help="Intra-op threads while timing. 1 (the default) gives steady times on a shared "
                                   "machine; more threads than free cores make the times scatter."))
state.remember("latency_threads")
with guard():
    key_dims = sorted(number_list(dim_text, "key dims", 1, spec.max_key_dim + 1, integer=True))
    spec.check_key_dims(key_dims, "cpu" if ctx.key.device == "cpu" else "cuda")
dtype = spec.timing_dtype(ctx.key.dtype, "cpu" if ctx.key.device == "cpu" else "cuda")  # a refused one: its default
lat_settings = {"key_dims": key_dims, "batch": batch, "tokens": tokens, "heads": info.value_heads,
                "value_dim": info.head_v_dim, "device": ctx.key.device, "dtype": dtype,
                "kernel": kernel, "threads": threads}
lat_key = json.dumps({**lat_settings, "path": ctx.key.path}, sort_keys=True)
lat_points = st.session_state.setdefault("latency_results", {}).setdefault(lat_key, [])
done = {p["key_dim"] for p in lat_points}
lat_label = "Time the kernel" if not done else "Resume" if len(done) < len(key_dims) else "Time again"
if jobs.controls("latency", lat_key, lat_label):
    todo = [d for d in key_dims if d not in done] or key_dims  # "Time again" re-times every dim
    if len(todo) == len(key_dims):
        lat_points.clear()

    lock = cache.compute_lock()  # resolved in the script run, for the job's thread

    def time_kernels(job):
        gen = latencies.kernel_latency(todo, batch=batch, tokens=tokens, heads=info.value_heads,
                                       value_dim=info.head_v_dim, device=ctx.key.device, dtype=dtype, kernel=kernel,
                                       threads=threads)
        job.report(0.0, f"timing dk {todo[0]}")
        for point in shrink.locked(gen, lock):
            merged(lat_points, point, lambda a, b: a["key_dim"] == b["key_dim"])
            job.items = lat_points
            job.report(len(lat_points) / len(key_dims), f"{len(lat_points)} of {len(key_dims)} key dims timed")

    jobs.launch("latency", lat_key, f"{ctx.name}, dk {', '.join(map(str, key_dims))}, B{batch} T{tokens}",
                time_kernels)
lat_other = jobs.busy_elsewhere("latency", lat_key)
if lat_other is not None:
    st.info(jobs.other_inputs_note(lat_other))
lat_job = jobs.mine("latency", lat_key)
lat_chart = st.empty()
lat_table = st.empty()
lat_drawn = [0]


def draw_latency(job=None):
    first = lat_points[0] if lat_points else None
    where = (f" on {first['device_name']} ({first['dtype']}, B{batch} T{tokens} H{info.value_heads} "
             f"dv{info.head_v_dim})" if first else "")
    lat_drawn[0] += 1
    lat_chart.plotly_chart(shrink_figures.latency_figure(lat_points, f"{kernel_label.capitalize()} "
                                                                     f"kernel time vs key dim{where}", key_dims=key_dims),
                           key=f"latency_chart_{lat_drawn[0]}")
    if lat_points:
        lat_table.table(styled(latency_table(lat_points), LATENCY_FORMATS))


draw_latency()
if jobs.unsettled(lat_job):
    jobs.follow(lat_job, draw_latency)
    st.rerun()
if lat_job is not None and lat_job.error:
    st.error(lat_job.error)
first = lat_points[0] if lat_points else None
st.caption(f"{kernel_label} kernel · B{batch} T{tokens} H{info.value_heads} "
           f"dv{info.head_v_dim} · device {ctx.key.device}"
           + (f" ({first['device_name']}) · dtype {first['dtype']} · {first['timer']}" if first else
              f" · dtype {dtype}"
              + (f" · {threads} CPU thread{'s' if threads != 1 else ''}" if ctx.key.device == "cpu" else ""))
           + " · error bars: interquartile range of the repeats · dotted lines: 64-row tile boundaries")
noisy = [p["key_dim"] for p in lat_points if p["noisy"]]
if noisy:
    st.warning(f"Noisy timing at dk {', '.join(map(str, noisy))}: the repeats spread by more than 20 % of their "
               "median (IQR), so the machine was busy; press **Time again**, or lower the thread count.")
if lat_points:
    downloads(lat_points, lat_settings, "latency")
