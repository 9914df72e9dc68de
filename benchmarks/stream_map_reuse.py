"""The sensitivity map of a STREAMED sample with and without layer-prefix reuse, side by side in one process.

Loads a bundled sample under a memory budget below its weights (so it is read one block at a time,
analysis.models.stream), then runs its map (analysis.shrink.sensitivity.sensitivity_points: the unpruned point and one
point per layer and ratio, point cache off) alternately with reuse (each point starts at its pruned layer on the
unpruned model's layer inputs kept on disk, analysis.models.stream.reuse) and without (every point's whole streamed
pass, the path before). Prints per run its time, the decoder blocks read, the checkpoint bytes read and what was
kept on disk; then the medians, the ratio reuse/whole and whether every cell is equal (relative 1e-5).

    nice .venv/bin/python benchmarks/stream_map_reuse.py [--model gated-deltanet-deep] [--fraction 0.8]
        [--ratios 0.25,0.5,0.75] [--eval-tokens 1024] [--context 256] [--repeats 2] [--threads 2]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gated-deltanet-deep")
    p.add_argument("--fraction", type=float, default=0.8, help="memory budget as a fraction of the weights")
    p.add_argument("--ratios", default="0.25,0.5,0.75")
    p.add_argument("--eval-tokens", type=int, default=1024)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    import tempfile

    import torch

    import analysis
    analysis.ready()
    torch.set_num_threads(args.threads)
    from analysis.io import point_cache
    from analysis.models import budget, load as models
    from analysis.models.prefix import PrefixCache
    from analysis.models.stream.model import StreamedModel
    from analysis.shrink import sensitivity
    from analysis.shrink.sensitivity import MapSettings, sensitivity_points

    point_cache.CACHE_DIR = Path(tempfile.mkdtemp(prefix="stream-map-bench-")) / "sweeps"  # kept states go beside
    whole = models.load_model(args.model, device="cpu")
    size = int(sum(t.numel() * t.element_size() for t in whole.parameters()) * args.fraction)
    del whole
    ratios = tuple(float(r) for r in args.ratios.split(","))
    s = MapSettings("l1", ratios, context=args.context, eval_tokens=args.eval_tokens, calib_sequences=2,
                    calib_tokens=64)  # l1 draws no calibration; the map still checks its size against the budget
    made: list = []

    def reuse(model, **kw):
        made.append(PrefixCache(model, **kw))
        return made[-1]

    def no_reuse(model, **kw):  # the path before: a streamed point runs its whole pass
        made.append(PrefixCache(model, **kw))
        made[-1].streamed = None
        return made[-1]

    runs = {"reuse": [], "whole": []}
    with budget.budget_scope(size):
        model = models.load_model(args.model, device="cpu")
        assert isinstance(model, StreamedModel), "the budget does not make the model streamed; lower --fraction"
        tok = models.load_tokenizer(model)
        print(f"{args.model}: {model.blocks} blocks, streamed under a {size / 2**20:.2f} MiB budget "
              f"({args.fraction:.0%} of its weights); map l1 at {list(ratios)}, {args.eval_tokens} validation tokens, "
              f"context {args.context}, CPU float32, torch threads {torch.get_num_threads()}, "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        for rep in range(args.repeats):
            for mode in (("reuse", "whole") if rep % 2 == 0 else ("whole", "reuse")):
                sensitivity.PrefixCache = reuse if mode == "reuse" else no_reuse
                bytes_before = model.skeleton.files.bytes_read
                start = time.perf_counter()
                with torch.no_grad():
                    points = list(sensitivity_points(model, tok, s, use_cache=False, yes=True))
                seconds = time.perf_counter() - start
                stats = made[-1].stats
                blocks = stats.blocks_read if mode == "reuse" else model.blocks * len(points)
                kept = made[-1].streamed.kept.used if mode == "reuse" else 0
                runs[mode].append({"seconds": seconds, "blocks": blocks, "points": points,
                                   "bytes": model.skeleton.files.bytes_read - bytes_before})
                print(f"  {mode:5s} repeat {rep + 1}: {seconds:7.1f} s, {len(points)} points, {blocks} decoder blocks "
                      f"read, {(model.skeleton.files.bytes_read - bytes_before) / 2**20:.1f} MiB read from the "
                      f"checkpoint, kept on disk {kept / 2**20:.1f} MiB, load {os.getloadavg()[0]:.1f}", flush=True)
    same = all(math.isclose(a["value"], b["value"], rel_tol=1e-5) and a["layer"] == b["layer"]
               for r in runs["reuse"] for w in runs["whole"] for a, b in zip(r["points"], w["points"], strict=True))
    med = {m: statistics.median(r["seconds"] for r in runs[m]) for m in runs}
    spread = {m: (min(r["seconds"] for r in runs[m]), max(r["seconds"] for r in runs[m])) for m in runs}
    blocks = {m: runs[m][0]["blocks"] for m in runs}
    read = {m: runs[m][0]["bytes"] for m in runs}
    print(f"median reuse {med['reuse']:.1f} s (range {spread['reuse'][0]:.1f}–{spread['reuse'][1]:.1f}), whole "
          f"{med['whole']:.1f} s (range {spread['whole'][0]:.1f}–{spread['whole'][1]:.1f})")
    print(f"decoder blocks read: reuse {blocks['reuse']} vs whole {blocks['whole']} "
          f"({blocks['reuse'] / blocks['whole']:.3f}×); checkpoint bytes read {read['reuse'] / read['whole']:.3f}×")
    print(f"every cell equal within 1e-5: {same}")
    print(f"stream_map_reuse_time_ratio: {med['reuse'] / med['whole']:.3f}")


if __name__ == "__main__":
    main()
