"""Latency of the recurrence kernel vs key dim, and of a whole-model forward, with device/dtype/shape.

CUDA: fla's own chunk kernels, timed after warm-up as the median of CUDA-event timings.
CPU: the project's torch path, timed with torch.utils.benchmark at a stated thread count.
"""
from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from analysis.cpu_ops.delta_rule import chunked_delta_rule
from analysis import limits
from analysis.errors import AnalysisError
from analysis.models import TILE_ROWS


def _cuda_median_ms(fn, warmup: int = 10, reps: int = 50) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _cpu_median_ms(fn, threads: int, min_run_time: float) -> float:
    from torch.utils import benchmark
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def _inputs(B, T, H, dk, dv, device, dtype, gated, gen):
    q = F.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1).to(device, dtype)
    k = F.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1).to(device, dtype)
    v = torch.randn(B, T, H, dv, generator=gen).to(device, dtype)
    beta = torch.rand(B, T, H, generator=gen).to(device, dtype)
    g = (-torch.rand(B, T, H, generator=gen) * 0.1).to(device, torch.float32) if gated else None
    return q, k, v, beta, g


def kernel_latency(key_dims: list[int], batch: int = 4, tokens: int = 1024, heads: int = 4, value_dim: int = 64,
                   device: str = "cpu", dtype: torch.dtype | None = None, gated: bool = False,
                   threads: int | None = None, min_run_time: float = 0.3):
    """Yield one timing dict per key dim (a generator, so a page can plot point by point)."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise AnalysisError("CUDA latency was requested but this machine has no usable GPU; use the CPU.")
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    threads = threads or torch.get_num_threads()
    gen = torch.Generator().manual_seed(0)
    for dk in key_dims:
        if not 1 <= dk <= 256:
            raise AnalysisError(f"Key dim {dk} is outside fla's supported 1..256.")
    limits.check_kernel(batch, tokens, heads, max(key_dims, default=1), value_dim, device)
    for dk in key_dims:
        q, k, v, beta, g = _inputs(batch, tokens, heads, dk, value_dim, device, dtype, gated, gen)
        if device.type == "cuda":
            if gated:
                from fla.ops.gated_delta_rule import chunk_gated_delta_rule as op
                fn = lambda: op(q=q, k=k, v=v, g=g.to(dtype), beta=beta)  # noqa: E731
            else:
                from fla.ops.delta_rule import chunk_delta_rule as op
                fn = lambda: op(q=q, k=k, v=v, beta=beta)  # noqa: E731
            with torch.inference_mode():
                ms = _cuda_median_ms(fn)
            timer = "CUDA events, median of 50 after 10 warm-up (fla Triton chunk kernel)"
        else:
            fn = lambda: chunked_delta_rule(q, k, v, beta, g)  # noqa: E731
            with torch.inference_mode():
                ms = _cpu_median_ms(fn, threads, min_run_time)
            timer = f"torch.utils.benchmark median, {threads} threads (project torch chunked path)"
        yield {"key_dim": dk, "tiles": -(-dk // TILE_ROWS), "ms": ms,
               "tokens_per_s": batch * tokens / (ms / 1e3), "device": str(device),
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
               "dtype": str(dtype).replace("torch.", ""), "batch": batch, "tokens": tokens, "heads": heads,
               "value_dim": value_dim, "op": "gated delta rule" if gated else "delta rule", "timer": timer}


def model_latency(model, batch: int = 4, tokens: int = 256, threads: int | None = None,
                  min_run_time: float = 0.5) -> dict:
    """Whole-model forward (prefill, no cache) latency on the model's own device and dtype."""
    param = next(model.parameters())
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0))
    ids = ids.to(param.device)
    fn = lambda: model(ids, use_cache=False)  # noqa: E731
    threads = threads or torch.get_num_threads()
    with torch.inference_mode():
        if param.device.type == "cuda":
            ms, timer = _cuda_median_ms(fn), "CUDA events, median of 50 after 10 warm-up"
        else:
            ms, timer = _cpu_median_ms(fn, threads, min_run_time), f"torch.utils.benchmark median, {threads} threads"
    return {"ms": ms, "tokens_per_s": batch * tokens / (ms / 1e3), "batch": batch, "tokens": tokens,
            "device": str(param.device), "dtype": str(param.dtype).replace("torch.", ""), "timer": timer}
