"""Benchmark: the server's share of a typed per-layer ratio on the Prune page (AppTest, no browser), for this checkout
and, side by side, another checkout of the project (e.g. `git worktree add /tmp/before a990f56`).

Each checkout runs in its own fresh process: the app on gated-deltanet-small (shipped l1 map, CPU, one intra-op
thread), the Prune page in per-layer mode, two warm-up reruns, then `--steps` reruns each after one typed ratio;
prints each rerun's seconds, and per checkout the median. Alternates the checkouts `--repeats` times. The browser's
own share (websocket, plotly drawing) is in benchmarks/typed_prediction_browser.py.
Run: .venv/bin/python benchmarks/prune_rerun_apptest.py [--other /tmp/before] [--repeats 3] [--steps 4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, os, sys, time
root = sys.argv[1]
sys.path.insert(0, root)
os.environ["STATE_RANK_DEFAULT_MODEL"] = os.path.join(root, "sample_models", "gated-deltanet-small")
import torch
torch.set_num_threads(1)
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(os.path.join(root, "app.py"), default_timeout=300).run()
at.switch_page("pages/prune.py").run()
at.radio(key="w:prune_mode").set_value("Per layer").run()
for v in (0.25, 0.5):
    at.number_input(key="w:layer_ratio_0").set_value(v).run()
times = []
for v in [0.75, 0.375, 0.25, 0.5] * int(sys.argv[2]):
    at.number_input(key="w:layer_ratio_1").set_value(v)
    t = time.perf_counter(); at.run(); times.append(time.perf_counter() - t)
assert not at.exception, [e.value for e in at.exception]
print(json.dumps(times))
"""


def reruns(root: Path, steps: int) -> list[float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(max(1, steps // 4))], capture_output=True,
                         text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, default=None, help="another checkout to time beside this one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    roots = {"this checkout": ROOT, **({f"other ({args.other})": args.other} if args.other else {})}
    got: dict[str, list[float]] = {name: [] for name in roots}
    load = os.getloadavg()
    for _ in range(args.repeats):
        for name, root in roots.items():
            times = reruns(root, args.steps)
            got[name] += times
            print(f"{name}: " + " ".join(f"{t:.3f}" for t in times), flush=True)
    print(f"Prune page rerun after a typed ratio (AppTest, gated-deltanet-small, CPU, 1 thread); load average "
          f"before: {load[0]:.1f} on {os.cpu_count()} cores")
    for name, xs in got.items():
        print(f"{name}: median {statistics.median(xs):.3f} s, min–max {min(xs):.3f}–{max(xs):.3f} s ({len(xs)} reruns)")
    if args.other:
        a, b = (statistics.median(xs) for xs in got.values())
        print(f"ratio this / other: {a / b:.2f}")


if __name__ == "__main__":
    main()
