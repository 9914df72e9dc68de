"""The Sweep page's latency sweep: the recurrence kernel timed against the key dim, as a background job."""
from __future__ import annotations

import json

import streamlit as st

from analysis.evaluate import latency as latencies
from ui.shared import cache, jobs, notice, shrink, shrink_figures, state
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.parse import number_list
from ui.shared.points import merged
from ui.shared.shrink_report import latency_table
from ui.sweep.sweep_view import downloads, styled

LATENCY_FORMATS = {"median (ms)": "{:.3f}", "IQR (ms)": "{:.3f}", "min (ms)": "{:.3f}", "max (ms)": "{:.3f}"}


def section(ctx: Context) -> None:
    st.header("Kernel latency vs key dim")
    info = ctx.info
    kernel = info.kernel
    spec = latencies.kernel_spec(kernel)
    kernel_label = spec.label
    l1, l2, l3, l4 = st.columns([3, 1, 1, 1])
    dim_text = state.field(l1.text_input, "Key dims dk (comma-separated)", "latency_dims", "16, 32, 48, 64, 96, 128")
    batch = int(state.field(l2.number_input, "Batch", "latency_batch", 2, 1, 64, step=1))
    tokens = int(state.field(l3.number_input, "Tokens", "latency_tokens", 512, 16, 16384, step=256))
    threads = int(state.field(l4.number_input, "CPU threads", "latency_threads", latencies.CPU_THREADS, 1, 256, step=1,
                              disabled=ctx.key.device != "cpu",
                              help="Intra-op threads while timing. 1 (the default) gives steady times on a shared "
                                   "machine; more threads than free cores make the times scatter."))
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
    lat_chart, lat_noticed = st.empty(), st.empty()
    lat_table = st.empty()
    lat_drawn = [0]

    def draw_latency(job=None):
        first = lat_points[0] if lat_points else None
        where = (f" on {first['device_name']} ({first['dtype']}, B{batch} T{tokens} H{info.value_heads} "
                 f"dv{info.head_v_dim})" if first else "")
        lat_drawn[0] += 1
        if not lat_points:  # a sentence, not blank axes, until the first point
            lat_chart.info(f"No kernel timings yet for these settings: press **{lat_label}** to time each key dim; "
                           "the chart fills in point by point.")
            return
        title = f"{kernel_label.capitalize()} kernel time vs key dim{where}"
        lat_chart.plotly_chart(shrink_figures.latency_figure(lat_points, title, key_dims=key_dims),
                               key=f"latency_chart_{lat_drawn[0]}")
        lat_noticed.caption(notice.latency(lat_points))
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
