"""Verify, Channel importance and the State lab timed side by side against an earlier commit (issue 42, item 3/4).

Checks the earlier commit (default 37146af, main before this work) out into a temporary `git worktree` and runs each
workload alternately with the old and the new code, each run a fresh process with a private empty point cache and
torch's own thread count (the dashboard's), the environment's OMP_WAIT_POLICY removed so each side keeps its own
default. The core calls the pages make, in one process each:

- verify: "Verify and choose" on gated-deltanet-small at the page's defaults (l1, its shipped map: 4,096 map tokens,
  16,384 choice and 16,384 held-out tokens, context 256): `allocate_and_choose(..., plan=...)` with the issue's
  by-eye plan (first press: the unpruned model and 4 plans on the choice tokens, 3 measurements on held-out
  text), then the same with one layer changed (second press: 1 new measurement, the rest from the point cache);
- importance: Channel importance opened on deltanet-small (the dashboard's default model) with every strategy
  ticked, ρ 0.5: the calibration (16 × 256 train tokens), its backward pass, each strategy's scores, the combined
  report (kept sets, agreement, energy): what the page computes before it is idle;
- statelab: the State lab's first view (one forward pass over the first prepared sentence on deltanet-small, the
  three rules' traces of layer 0, head 0) while Verify's first press runs in another thread of the same process,
  as a second session's job runs in the one dashboard server.

Prints each time, the medians with their spread, the per-repeat ratios new/old, the load average, and whether the
numbers are equal (Verify: every measured value and the held-out answer, relative 1e-6; importance: every score).

    nice .venv/bin/python benchmarks/speed_vs_main.py [--repeats 2] [--commit 37146af] [--only verify,importance,statelab]
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
BEFORE = "37146af"  # main before this work

PRELUDE = r"""
import json, os, sys, tempfile, threading, time
from pathlib import Path
sys.path.insert(0, ".")
import analysis
analysis.ready()
import torch
from analysis.io import point_cache
from analysis.models import load as models
point_cache.CACHE_DIR = Path(tempfile.mkdtemp())  # every point computed: nothing served from a cache
if len(sys.argv) > 1:  # but the encoded train split from the benchmark's shared folder (new code only reads it)
    try:
        from analysis.io import token_cache
        token_cache.CACHE_DIR = Path(sys.argv[1])
    except ImportError:  # the earlier commit encodes the split in every process
        pass
out = {"source": analysis.__file__, "threads": torch.get_num_threads(), "omp": os.environ.get("OMP_WAIT_POLICY")}
def verify_press(model, tok, smap, ratios, cancel=None):
    from analysis.shrink.allocate import allocate_and_choose
    from analysis.models.key_plan import plan_key_dims
    n = len(plan_key_dims(model, ratio=0.0))
    ratios = (ratios * n)[:n]
    plan = {"ratios": ratios, "dims": plan_key_dims(model, ratios=ratios)}
    rep = allocate_and_choose(model, tok, smap, None, None, None, None, plan=plan, cancel=cancel)
    held = rep["choice"]["held_out"]
    return [c["measured_value"] for c in rep["choice"]["candidates"]] + [held["chosen"]["value"],
            held["baseline_value"]] + ([held["uniform"]["value"]] if held.get("uniform") else [])
def verify_setup():
    from analysis.shrink.sensitivity import DEFAULT_RATIOS, MapSettings, load_shipped
    model = models.load_model("gated-deltanet-small", device="cpu")
    tok = models.load_tokenizer(model)
    return model, tok, load_shipped(model, "gated-deltanet-small", MapSettings("l1", DEFAULT_RATIOS, "ppl"))
PLANS = ([0.875, 0.5, 0.25, 0.375], [0.75, 0.5, 0.25, 0.5])  # the issue's by-eye plan, then one layer changed
"""

WARM = r"""
from analysis.data import corpus
corpus.encoded_split("train", corpus.load_tokenizer())
"""

CHILDREN = {
    "verify": r"""
model, tok, smap = verify_setup()
values = []
for i, ratios in enumerate(PLANS):
    start = time.perf_counter()
    values += verify_press(model, tok, smap, list(ratios))
    out[f"press {i + 1}"] = time.perf_counter() - start
out["values"] = values
""",
    "importance": r"""
from analysis.shrink.calibration import calibrate
from analysis.shrink.importance import combined, strategy_importance
from analysis.shrink.prune import usable_strategies
from analysis.shrink.strategies import STRATEGIES
model = models.load_model("deltanet-small", device="cpu")
tok = models.load_tokenizer(model)
names, _ = usable_strategies(model)
start = time.perf_counter()
calib = calibrate(model, tok, 16, 256, 0)
calib.gradients()
done = {n: strategy_importance(model, calib if STRATEGIES[n].needs_calibration else None, n, 0.5, 0) for n in
        sorted(names, key=lambda n: (STRATEGIES[n].needs_calibration, STRATEGIES[n].needs_gradients))}
report = combined(model, calib, done, 0.5)
out["open to idle"] = time.perf_counter() - start
out["values"] = [float(torch.as_tensor(s).double().sum()) for n in names for layer in report["scores"][n]
                 for s in layer]
""",
    "statelab": r"""
from analysis.inspect import state_lab as lab
stop = threading.Event()
model, tok, smap = verify_setup()
small = models.load_model("deltanet-small", device="cpu")
small_tok = models.load_tokenizer(small)
text = "The cat sat on the mat. The dog sat on the rug. The cat sat on the mat again, and the dog slept."

def other_session():
    try:
        verify_press(model, tok, smap, [0.875, 0.5, 0.25, 0.375], cancel=stop)
    except BaseException:
        pass
job = threading.Thread(target=other_session, daemon=True)
job.start()
time.sleep(5.0)  # Verify is measuring by now
start = time.perf_counter()
ids = lab.text_ids(small_tok, text)
obs = lab.observe(small, ids, [small_tok.decode([int(i)]) for i in ids])
traces = lab.trace_head(lab.head_inputs(obs, 0, 0))
out["first view during Verify"] = time.perf_counter() - start
out["verify still running"] = job.is_alive()
stop.set()
job.join()
out["values"] = [float(t.states.double().sum()) if hasattr(t, "states") else 0.0 for t in traces.values()]
""",
}


def run(tree: Path, workload: str, tokens: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = PRELUDE + CHILDREN[workload] + '\nprint("RESULT " + json.dumps(out))\n'
    done = subprocess.run([sys.executable, "-c", code, str(tokens)], cwd=tree, capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        sys.exit(f"{workload} failed in {tree}:\n{done.stderr[-3000:]}")
    got = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("RESULT ")).removeprefix("RESULT "))
    if not Path(got["source"]).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"The run in {tree} imported the code of {got['source']}, not its own.")
    return got


def largest_difference(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b)), default=0.0)


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):6.1f} s  [{min(values):.1f}–{max(values):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--commit", default=BEFORE)
    ap.add_argument("--only", default="verify,importance,statelab")
    args = ap.parse_args()
    workloads = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(workloads) - set(CHILDREN)
    if unknown:
        sys.exit(f"Unknown workload(s) {', '.join(sorted(unknown))}; choose from {', '.join(CHILDREN)}.")
    with tempfile.TemporaryDirectory(prefix="speed-vs-main-") as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(old), args.commit], cwd=ROOT, check=True)
        try:
            if (ROOT / ".venv").exists() and not (old / ".venv").exists():
                (old / ".venv").symlink_to((ROOT / ".venv").resolve())
            # the new code keeps the encoded train split on disk (analysis.io.token_cache): fill it once, untimed,
            # as any earlier process on this checkout (a test, the CLI, a page) has done
            subprocess.run([sys.executable, "-c", PRELUDE + WARM, str(Path(tmp) / "encoded")], cwd=ROOT, check=True,
                           capture_output=True)
            for workload in workloads:
                runs = {"old": [], "new": []}
                load_start = os.getloadavg()
                for r in range(args.repeats):
                    for side, tree in (("old", old), ("new", ROOT)):
                        got = run(tree, workload, Path(tmp) / "encoded")
                        runs[side].append(got)
                        times = ", ".join(f"{k} {v:.1f} s" for k, v in got.items() if isinstance(v, float))
                        print(f"{workload} repeat {r + 1} {side}: {times} (load {os.getloadavg()[0]:.1f})", flush=True)
                load_end = os.getloadavg()
                report(workload, runs, load_start, load_end, args)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)


def report(workload: str, runs: dict, load_start, load_end, args) -> None:
    new = runs["new"][0]
    print(f"--- {workload}: CPU float32, torch threads {new['threads']}, OMP_WAIT_POLICY old "
          f"{runs['old'][0]['omp'] or 'unset (libgomp default)'} / new {new['omp']}; load average (1/5/15 min) "
          f"{'/'.join(f'{x:.1f}' for x in load_start)} at the start, {'/'.join(f'{x:.1f}' for x in load_end)} at "
          f"the end; {args.repeats} repeats, alternated")
    for label in (k for k, v in new.items() if isinstance(v, float)):
        o = [g[label] for g in runs["old"]]
        n = [g[label] for g in runs["new"]]
        ratios = [b / a for a, b in zip(o, n)]
        print(f"  {label:26s} before ({args.commit}) {spread(o)}   now {spread(n)}   ratio now/before "
              f"{statistics.median(n) / statistics.median(o):.2f} (per repeat {', '.join(f'{x:.2f}' for x in ratios)})")
    if "verify still running" in new:
        print(f"  Verify still running when the view was ready: old {[g['verify still running'] for g in runs['old']]},"
              f" new {[g['verify still running'] for g in runs['new']]}")
    diff = max(largest_difference(a["values"], b["values"]) for a in runs["old"] for b in runs["new"])
    print(f"  numbers equal (largest relative difference {diff:.1e} ≤ 1e-6): {diff <= 1e-6}")


if __name__ == "__main__":
    main()
