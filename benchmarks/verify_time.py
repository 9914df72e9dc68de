"""Time of "Verify and choose" on a bundled sample at the dashboard's default settings (issue 29: ≤ 30 s).

The Prune page's job is `analysis.shrink.allocate.allocate_and_choose(..., plan=your plan)` after its calibration
(shared with the other Shrink pages): your plan and, at its state bytes, the allocator's, uniform and
rank-suggested plans, each pruned and measured on the map's validation split at 4× the map's tokens (16,384).
Timed here the same way: the calibration (default 16 × 256 train tokens, for a strategy that reads data), then
the workflow, with a private empty point cache (cold), then again with one plan changed (the others and the
unpruned model come from the cache, as on a second press).

    nice .venv/bin/python benchmarks/verify_time.py [--model gated-deltanet-small] [--strategy l1] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import analysis  # noqa: E402

analysis.ready()
from analysis.io import point_cache  # noqa: E402
from analysis.models import load as models  # noqa: E402
from analysis.shrink.allocate import allocate_and_choose  # noqa: E402
from analysis.models.key_plan import plan_key_dims  # noqa: E402
from analysis.shrink.sensitivity import (DEFAULT_RATIOS, MapSettings, calibration_for, compute_map,  # noqa: E402
                                         load_shipped, recall_task)
from analysis.shrink.strategies import get_strategy  # noqa: E402

PLANS = ([0.875, 0.5, 0.25, 0.375], [0.75, 0.5, 0.25, 0.5])  # the by-eye plan, then one layer changed


def once(model, tok, smap, strategy, task) -> tuple[float, float, float]:
    """(calibration s, first press s, second press with one plan changed s), in a fresh private cache."""
    with tempfile.TemporaryDirectory() as cache:
        point_cache.CACHE_DIR = Path(cache)
        t0 = time.perf_counter()
        s = MapSettings(**{**smap["settings"], "ratios": tuple(smap["settings"]["ratios"])})
        calib = calibration_for(model, tok, s, task) if get_strategy(strategy).needs_calibration else None
        t1 = time.perf_counter()
        times = []
        for ratios in PLANS:
            n = len(plan_key_dims(model, ratio=0.0))
            ratios = (ratios * n)[:n]
            plan = {"ratios": ratios, "dims": plan_key_dims(model, ratios=ratios)}
            start = time.perf_counter()
            allocate_and_choose(model, tok, smap, None, None, task, calib, plan=plan)
            times.append(time.perf_counter() - start)
        return t1 - t0, times[0], times[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gated-deltanet-small")
    ap.add_argument("--strategy", default="l1")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model = models.load_model(args.model, device="cpu")
    task = recall_task(model)
    tok = None if task else models.load_tokenizer(model)
    s = MapSettings(args.strategy, DEFAULT_RATIOS, "recall" if task else "ppl")
    smap = load_shipped(model, args.model, s) or compute_map(model, tok, s, task, yes=True)
    start_load = os.getloadavg()[0]
    runs = [once(model, tok, smap, args.strategy, task) for _ in range(args.repeats)]
    load = os.getloadavg()[0]
    for name, i in (("calibration", 0), ("Verify and choose, first press", 1), ("second press, one plan changed", 2)):
        values = [r[i] for r in runs]
        print(f"{name:34s} median {statistics.median(values):6.1f} s  [{min(values):.1f}–{max(values):.1f}]")
    total = [r[0] + r[1] for r in runs]
    print(f"{args.model}, {args.strategy}, CPU float32, torch threads {__import__('torch').get_num_threads()}, "
          f"load average {start_load:.1f} at the start, {load:.1f} at the end; {args.repeats} repeats; the first "
          "press measures the unpruned model and 4 plans (5 × 16,384 validation tokens), the second 1 plan")
    print(f"verify_first_press_s: {statistics.median(total):.1f}")


if __name__ == "__main__":
    main()
