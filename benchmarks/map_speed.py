"""Time of the sensitivity map against the code that landed before issue 42 (layer-prefix reuse), side by side.

Checks the earlier commit (default a990f56) out into a temporary `git worktree`, then runs the map of
gated-deltanet-small (l1, ratios 0.25/0.5/0.75, 4,096 validation tokens, context 256; analysis.shrink.sensitivity
.compute_map, the CLI `sensitivity` workflow) alternately with the old and the new code, each run in a fresh process
with a private empty point cache (nothing served from a cache) and the same torch threads. Prints every time, the
medians with their spread, the ratio new/old and whether every cell's number is equal (relative 1e-5). The
worktree is removed at the end. Target (issue 42): ratio ≤ 0.5.

    nice .venv/bin/python benchmarks/map_speed.py [--repeats 2] [--commit a990f56] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "a990f56"  # the last commit before issue 42

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, ".")
import torch
import analysis
analysis.ready()
from analysis.io import point_cache
from analysis.models import load as models
from analysis.shrink.sensitivity import MapSettings, compute_map
settings = json.loads(sys.argv[1])
if settings.pop("threads"):
    torch.set_num_threads(int(sys.argv[2]))
name = settings.pop("model")
with tempfile.TemporaryDirectory() as cache:
    point_cache.CACHE_DIR = Path(cache)
    model = models.load_model(name, device="cpu")
    tok = models.load_tokenizer(model)
    s = MapSettings(**{**settings, "ratios": tuple(settings["ratios"])})
    start = time.perf_counter()
    smap = compute_map(model, tok, s, use_cache=False, yes=True)
    seconds = time.perf_counter() - start
print("RESULT " + json.dumps({"seconds": seconds, "source": analysis.__file__, "baseline": smap["baseline"], "threads": torch.get_num_threads(),
                              "cells": [[p["layer"], p["ratio"], p["value"], p["loss"]] for p in smap["points"]]}))
"""


def run_map(tree: Path, settings: dict, threads: int | None) -> dict:
    args = [sys.executable, "-c", CHILD, json.dumps({**settings, "threads": threads is not None}), str(threads or 0)]
    done = subprocess.run(args, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"The map failed in {tree}:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line.removeprefix("RESULT "))
    if not Path(got["source"]).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"The run in {tree} imported the code of {got['source']}, not its own.")
    return got


def same_numbers(a: dict, b: dict, rel: float = 1e-5) -> float:
    """Largest relative difference of the baseline and every cell's value (cells matched by layer and ratio)."""
    cells_a = {(c[0], c[1]): c[2] for c in a["cells"]}
    cells_b = {(c[0], c[1]): c[2] for c in b["cells"]}
    if cells_a.keys() != cells_b.keys():
        return float("inf")
    pairs = [(a["baseline"], b["baseline"])] + [(cells_a[k], cells_b[k]) for k in cells_a]
    return max(abs(x - y) / abs(x) for x, y in pairs)


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):6.1f} s  [{min(values):.1f}–{max(values):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--commit", default=BEFORE)
    ap.add_argument("--model", default="gated-deltanet-small")
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None, help="torch threads in both (default: torch's own)")
    args = ap.parse_args()
    settings = {"model": args.model, "strategy": "l1", "ratios": [0.25, 0.5, 0.75], "metric": "ppl",
                "split": "validation", "context": 256, "eval_tokens": args.eval_tokens}
    with tempfile.TemporaryDirectory(prefix="map-speed-") as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(old), args.commit], cwd=ROOT, check=True)
        try:
            if (ROOT / ".venv").exists() and not (old / ".venv").exists():
                (old / ".venv").symlink_to((ROOT / ".venv").resolve())
            load_start = os.getloadavg()[0]
            runs = {"old": [], "new": []}
            for r in range(args.repeats):
                for side, tree in (("old", old), ("new", ROOT)):
                    got = run_map(tree, settings, args.threads)
                    runs[side].append(got)
                    print(f"repeat {r + 1} {side}: {got['seconds']:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
            load_end = os.getloadavg()[0]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    old_s = [g["seconds"] for g in runs["old"]]
    new_s = [g["seconds"] for g in runs["new"]]
    diff = max(same_numbers(a, b) for a in runs["old"] for b in runs["new"])
    ratios = [n / o for o, n in zip(old_s, new_s)]
    print(f"{args.model}, l1, ratios 0.25/0.5/0.75, {args.eval_tokens:,} validation tokens, context 256, CPU float32, "
          f"torch threads {runs['new'][0]['threads']}, point cache off (private, empty); load average "
          f"{load_start:.1f} at the start, {load_end:.1f} at the end; {args.repeats} repeats, alternated")
    print(f"before ({args.commit})  {spread(old_s)}")
    print(f"now              {spread(new_s)}")
    print(f"per-repeat ratios now/before: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"numbers equal (largest relative difference {diff:.1e} ≤ 1e-5): {diff <= 1e-5}")
    print(f"map_time_ratio: {statistics.median(new_s) / statistics.median(old_s):.2f}")


if __name__ == "__main__":
    main()
