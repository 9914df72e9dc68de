"""Latency of the recurrence kernel vs key dim, and of a whole-model forward, with device/dtype/shape.

Every number is a repeated measurement after warm-up, reported as its median with the spread of the
repeats (interquartile range and min–max) and the repeat count. A single run on a busy machine can be
off by 10× (other processes, thread wake-ups), so a time without its spread cannot be trusted.

CUDA: fla's own chunk kernels, timed with CUDA events (one event pair per repeat) after warm-up.
CPU: the project's torch path, wall-clock per repeat at a fixed intra-op thread count (default 1: with
more threads than free cores the threads wait for each other and the times scatter).
"""
from __future__ import annotations

import math
import statistics
import time

import torch

from analysis.models import limits
from analysis.errors import AnalysisError
from analysis.archs.kernels import KERNELS, kernel_spec  # noqa: F401  (KERNELS re-exported)
from analysis.models.key_plan import tiles_of

NOISY_SPREAD = 0.2      # IQR / median above this: the measurement is flagged as noisy
CPU_THREADS = 1         # default intra-op threads for CPU timings (stated with every number)
CPU_REPEATS, CUDA_REPEATS = 15, 50
CPU_WARMUP, CUDA_WARMUP = 2, 10
MAX_REPEATS = 200
MIN_REPEAT_S = 1e-3     # a CPU repeat runs the call enough times to last this long (timer resolution)


def timing_stats(samples_ms) -> dict:
    """Median, quartiles (linear interpolation, as numpy's default percentile), IQR, min, max and a noisy flag."""
    xs = sorted(float(x) for x in samples_ms)
    if not xs:
        raise AnalysisError("No timing samples were taken; ask for at least one repeat.")
    median = statistics.median(xs)
    q1, q3 = (statistics.quantiles(xs, n=4, method="inclusive")[::2] if len(xs) > 1 else (xs[0], xs[0]))
    iqr = q3 - q1
    relative = iqr / median if median > 0 else math.inf
    return {"median_ms": median, "repeats": len(xs), "noisy": bool(relative > NOISY_SPREAD),
            "spread": {"iqr_ms": iqr, "q1_ms": q1, "q3_ms": q3, "min_ms": xs[0], "max_ms": xs[-1],
                       "iqr_over_median": relative}}


def _cuda_samples_ms(fn, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _cpu_samples_ms(fn, threads: int, warmup: int, repeats: int, min_run_time: float, number: int | None,
                    clock) -> list[float]:
    """Per repeat, the mean time of `number` back-to-back calls (chosen so a repeat lasts ≥ MIN_REPEAT_S)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(warmup):
            t0 = clock()
            fn()
            one = clock() - t0
        if number is None:
            number = max(1, math.ceil(MIN_REPEAT_S / max(one, 1e-9))) if warmup else 1
        times, spent = [], 0.0
        while len(times) < repeats or (spent < min_run_time and len(times) < MAX_REPEATS):
            t0 = clock()
            for _ in range(number):
                fn()
            elapsed = clock() - t0
            spent += elapsed
            times.append(elapsed / number * 1e3)
        return times
    finally:
        torch.set_num_threads(before)


def time_call(fn, device: str | torch.device = "cpu", threads: int | None = None, repeats: int | None = None,
              warmup: int | None = None, min_run_time: float = 0.0, number: int | None = None,
              clock=time.perf_counter) -> dict:
    """Time `fn` repeatedly after warm-up on `device`: timing_stats plus threads, warm-up and the timer's name.

    CPU: at least `repeats` repeats and at least `min_run_time` seconds of timed calls (at most MAX_REPEATS).
    `clock` and `number` exist so tests can inject a fake timer.
    """
    device = torch.device(device)
    if device.type == "cuda":
        repeats, warmup = repeats or CUDA_REPEATS, CUDA_WARMUP if warmup is None else warmup
        samples = _cuda_samples_ms(fn, warmup, repeats)
        return {**timing_stats(samples), "threads": None, "warmup": warmup,
                "timer": f"CUDA events, median of {repeats} after {warmup} warm-up"}
    threads = threads or CPU_THREADS
    if threads < 1:
        raise AnalysisError(f"The CPU thread count must be at least 1, got {threads}.")
    repeats, warmup = repeats or CPU_REPEATS, CPU_WARMUP if warmup is None else warmup
    if not 1 <= repeats <= MAX_REPEATS:
        raise AnalysisError(f"Repeats must lie between 1 and {MAX_REPEATS}, got {repeats}.")
    samples = _cpu_samples_ms(fn, threads, warmup, repeats, min_run_time, number, clock)
    stats = timing_stats(samples)
    return {**stats, "threads": threads, "warmup": warmup,
            "timer": f"wall clock, median of {stats['repeats']} after {warmup} warm-up, "
                     f"{threads} CPU thread{'s' if threads != 1 else ''}"}


def kernel_inputs(B, T, H, dk, dv, device, dtype, spec, gen) -> dict:
    """Random inputs of the shapes `spec`'s kernel takes (its recurrence's `latency_inputs`)."""
    return spec.recurrence.latency_inputs(B, T, H, dk, dv, device, dtype, gen)


def cuda_arguments(spec, x: dict, dtype) -> dict:
    """fla's chunk-kernel keywords for inputs `x`: its names for them (`spec.cuda_names`), g in `dtype`, and the fixed
    settings the family's layer passes (`spec.cuda_settings`)."""
    names = dict(spec.cuda_names)
    return {**{names.get(n, n): (t.to(dtype) if n == "g" else t) for n, t in x.items()}, **dict(spec.cuda_settings)}


def _cuda_op(spec, x: dict, dtype):
    """fla's chunk kernel on inputs `x` (what CUDA tensors run)."""
    import importlib
    op = getattr(importlib.import_module(spec.cuda_op[0]), spec.cuda_op[1])
    args = cuda_arguments(spec, x, dtype)
    return lambda: op(**args)


def _labelled(stats: dict, batch: int, tokens: int) -> dict:
    """The stats plus `ms` (the median, the one number older readers take) and throughput."""
    return {**stats, "ms": stats["median_ms"], "tokens_per_s": batch * tokens / (stats["median_ms"] / 1e3)}


def kernel_latency(key_dims: list[int], batch: int = 4, tokens: int = 1024, heads: int = 4, value_dim: int = 64,
                   device: str = "cpu", dtype: torch.dtype | None = None, kernel: str = "delta_rule",
                   threads: int | None = None, min_run_time: float = 0.0, repeats: int | None = None):
    """Yield one timing dict per key dim (a generator, so a page can plot point by point) of the named kernel
    (the model's `Adapter.kernel`; see analysis.archs.kernels)."""
    spec = kernel_spec(kernel)
    device = torch.device(device)
    spec.check_key_dims(key_dims, device.type)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise AnalysisError("CUDA latency was requested but this machine has no usable GPU; use the CPU.")
    # the caller's dtype (the model's), except one the GPU kernel refuses: then the kernel's default, labelled below
    asked = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
    dtype = getattr(torch, spec.timing_dtype(asked, device.type))
    gen = torch.Generator().manual_seed(0)
    limits.check_kernel(batch, tokens, heads, max(key_dims, default=1), value_dim, device)
    for dk in key_dims:
        x = kernel_inputs(batch, tokens, heads, dk, value_dim, device, dtype, spec, gen)
        if device.type == "cuda":
            fn, path = _cuda_op(spec, x, dtype), "fla Triton chunk kernel"
        else:
            fn, path = (lambda: spec.recurrence.run(x)), "project torch chunked path"
        with torch.inference_mode():
            stats = time_call(fn, device, threads=threads, repeats=repeats, min_run_time=min_run_time)
        yield {"key_dim": dk, "tiles": tiles_of(dk), **_labelled(stats, batch, tokens),
               "timer": f"{stats['timer']} ({path})", "device": str(device),
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
               "dtype": str(dtype).replace("torch.", ""), "batch": batch, "tokens": tokens, "heads": heads,
               "value_dim": value_dim, "op": spec.label, "kernel": kernel}


def model_latency(model, batch: int = 4, tokens: int = 256, threads: int | None = None,
                  min_run_time: float = 0.0, repeats: int | None = None) -> dict:
    """Whole-model forward (prefill, no cache) latency on the model's own device and dtype."""
    param = next(model.parameters())
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0))
    ids = ids.to(param.device)
    fn = lambda: model(ids, use_cache=False)  # noqa: E731
    with torch.inference_mode():
        stats = time_call(fn, param.device, threads=threads, repeats=repeats, min_run_time=min_run_time)
    return {**_labelled(stats, batch, tokens), "batch": batch, "tokens": tokens, "device": str(param.device),
            "dtype": str(param.dtype).replace("torch.", "")}


def summary(point: dict) -> str:
    """'12.3 ms median (IQR 0.4, min–max 12.0–13.1; 15 repeats, 1 thread)', plus ' — noisy' when flagged."""
    s = point["spread"]
    threads = point.get("threads")
    who = f"; {point['repeats']} repeats" + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "")
    return (f"{point['median_ms']:.3g} ms median (IQR {s['iqr_ms']:.2g}, min–max {s['min_ms']:.3g}–{s['max_ms']:.3g}"
            f"{who})" + (" — noisy" if point["noisy"] else ""))
