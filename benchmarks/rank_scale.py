"""Rank analysis on a real-size model costs a small multiple of the model's own forward pass.

Random-init fla DeltaNet and Gated DeltaNet with the 340M shape (hidden 1024, 24 layers, 8 heads,
dk = dv = 128; built from the config, nothing downloaded), seeded random token ids (a random-init model
has no tokenizer worth using; the cost does not depend on the text), CPU float32. In one run, repeat by
repeat and side by side so the host's noise falls on all alike:
  forward      plain no-grad forward (logits), what any use of the model costs;
  rank         `collect_states(stride=64)` with spectral metrics, what `python -m analysis rank --stride 64` runs;
  every-token  (with --every-token) that plus the rank utilization after every token from the same
               pass (`collect_states(..., every_token=True)`), what `rank --every-token` runs.
Each family runs in its own child process, so its peak RSS is its own; the target is ≤ 1.5 × the fp32
weight bytes + 1 GB. Ratios are medians of wall time over repeats (spread as min–max), with the ratio of
CPU time (process_time, all threads) beside them: on a shared host it is less swayed by other jobs. Last line:
`rank_overhead_vs_forward: X` (the worst family's rank/forward ratio).

Usage: `python benchmarks/rank_scale.py [--every-token] [--tokens 2048 --layers 24 --repeats 3]`
(`--tokens 256 --layers 4` is a quick check of the same shape per layer).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.real_size import FAMILIES, VOCAB, build  # noqa: E402


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measure(family: str, args) -> dict:
    """One family in this process: side-by-side timings, peak RSS, fp32 weight bytes."""
    from analysis.inspect.states import collect_states
    model = build(family, "340M", args.layers)
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, VOCAB, (1, args.tokens), generator=torch.Generator().manual_seed(1))
    runs = {"forward": lambda: model(ids, use_cache=False).logits,
            "rank": lambda: collect_states(model, ids, stride=args.stride)}
    if args.every_token:
        collect_states(model, ids[:, :8], every_token=True)  # load (or compile) the numba kernel once, not timed
        runs["every-token"] = lambda: collect_states(model, ids, stride=args.stride, every_token=True)
    times = {name: [] for name in runs}
    cpu_times = {name: [] for name in runs}
    with torch.no_grad():
        model(ids[:, :64], use_cache=False)  # warm-up: first-call allocations
        for _ in range(args.repeats):
            for name, run in runs.items():
                t0, c0 = time.perf_counter(), time.process_time()
                run()
                times[name].append(time.perf_counter() - t0)
                cpu_times[name].append(time.process_time() - c0)
    return {"family": family, "parameters": params, "weight_bytes_fp32": 4 * params, "peak_rss": peak_rss(),
            "times": times, "cpu_times": cpu_times, "threads": torch.get_num_threads()}


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[len(xs) // 2] + xs[(len(xs) - 1) // 2]) / 2


def report(r: dict, args) -> float:
    t = r["times"]
    gb = 1024 ** 3
    print(f"{r['family']}: {r['parameters'] / 1e6:.0f} M parameters, {args.layers} layers, 1×{args.tokens} random "
          f"token ids, stride {args.stride}, CPU float32, {r['threads']} threads, {args.repeats} repeats")
    fwd = median(t["forward"])
    cpu = r.get("cpu_times", {})
    for name, xs in t.items():
        ratio = "" if name == "forward" else f"  → {median(xs) / fwd:.2f}× forward"
        if name in cpu and name != "forward":  # CPU seconds: less swayed by other jobs on a shared host
            ratio += f" (CPU time {median(cpu[name]) / median(cpu['forward']):.2f}×)"
        print(f"  {name:12s} {median(xs):8.2f} s  [{min(xs):.2f}–{max(xs):.2f}] wall{ratio}")
    limit = 1.5 * r["weight_bytes_fp32"] + gb
    print(f"  peak RSS {r['peak_rss'] / gb:.2f} GB; fp32 weights {r['weight_bytes_fp32'] / gb:.2f} GB; "
          f"target ≤ 1.5 × weights + 1 GB = {limit / gb:.2f} GB: {'met' if r['peak_rss'] <= limit else 'NOT met'}")
    return median(t["rank"]) / fwd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--stride", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every-token", action="store_true", help="also time rank + the every-token trace")
    parser.add_argument("--family", choices=FAMILIES, help="(internal) measure one family and print JSON")
    args = parser.parse_args()
    if args.family:
        print(json.dumps(measure(args.family, args)))
        return
    ratios, every = [], []
    for family in FAMILIES:  # a child process each, so each peak RSS is that family's own
        out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--family", family], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        ratios.append(report(r, args))
        if args.every_token:
            every.append(median(r["times"]["every-token"]) / median(r["times"]["forward"]))
    if args.every_token:
        print(f"every_token_overhead_vs_forward: {max(every):.2f} (target ≤ 3)")
    print(f"rank_overhead_vs_forward: {max(ratios):.2f}")


if __name__ == "__main__":
    main()
