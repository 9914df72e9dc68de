"""Does the sensitivity map pay on the deep sample? The allocator's plan vs uniform on held-out text.

For gated-deltanet-deep (12 Gated DeltaNet layers) and mean ratios 0.5 and 0.75: the knapsack plan from the
shipped l1 map (analysis.shrink.allocate.allocate, same state bytes as uniform) and the uniform plan, each
pruned with l1 and measured on the TEST split (held-out: the map read the validation split), 16,384 tokens,
context 256, with the paired difference over windows ± its standard error. Also: whether the map's layers differ
beyond their standard errors (at each ratio, χ² of the layers' losses around their SE-weighted mean).

    nice .venv/bin/python evidence/deep_sample_evidence.py [--json sample_models/results/deep-sample-evidence.json]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import analysis  # noqa: E402

analysis.ready()
from analysis.evaluate.perplexity import paired_difference, perplexity  # noqa: E402
from analysis.inspect.report import write_json  # noqa: E402
from analysis.models import load as models  # noqa: E402
from analysis.models.key_plan import plan_key_dims  # noqa: E402
from analysis.shrink.allocate import allocate  # noqa: E402
from analysis.shrink.prune import prune  # noqa: E402
from analysis.shrink.sensitivity import grid, shipped_map_path  # noqa: E402

NAME, STRATEGY, TARGETS, TOKENS, CONTEXT = "gated-deltanet-deep", "l1", (0.5, 0.75), 16384, 256


def spread(smap: dict) -> list[dict]:
    """Per ratio: the layers' losses, χ² around the SE-weighted mean (df = layers − 1), and the most and least
    sensitive layer with their gap in units of the SE of the difference (hypot of the two SEs)."""
    g = grid(smap)
    rows = []
    for j, r in enumerate(g.ratios):
        x = [row[j] for row in g.losses]
        se = [row[j] for row in g.ses]
        w = [1 / s ** 2 for s in se]
        mean = sum(a * b for a, b in zip(w, x)) / sum(w)
        chi2 = sum(((a - mean) / s) ** 2 for a, s in zip(x, se))
        hi, lo = max(range(len(x)), key=x.__getitem__), min(range(len(x)), key=x.__getitem__)
        rows.append({"ratio": r, "losses": x, "ses": se, "chi2": chi2, "df": len(x) - 1,
                     "most": hi, "least": lo, "gap_in_se": (x[hi] - x[lo]) / math.hypot(se[hi], se[lo])})
    return rows


def measure(model, tok) -> dict:
    return perplexity(model, tok, "test", context=CONTEXT, max_tokens=TOKENS, per_window=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    smap = json.loads(shipped_map_path(NAME, STRATEGY).read_text())
    model = models.load_model(NAME, device="cpu")
    tok = models.load_tokenizer(model)
    base = measure(model, tok)
    out = {"model": NAME, "strategy": STRATEGY, "map": smap["measure"],
           "held_out": f"{base['dataset']}, {base['split']} split, {base['tokens']:,} tokens, context {CONTEXT}",
           "unpruned_ppl": base["perplexity"], "spread": spread(smap), "budgets": []}
    for target in TARGETS:
        alloc = allocate(smap, mean_ratio=target)
        uniform_dims = plan_key_dims(model, ratio=target)
        got = {}
        for name, dims in (("uniform", uniform_dims), ("allocated", alloc.dims)):
            m = measure(prune(model, STRATEGY, dims).model, tok)
            got[name] = {"dims": dims, "ppl": m["perplexity"],
                         "loss": math.log(m["perplexity"] / base["perplexity"]), "windows": m["window_losses"]}
        d = paired_difference(got["uniform"]["windows"], got["allocated"]["windows"])
        row = {"mean_ratio": target, "allocated_dims": alloc.dims, "predicted_allocated": alloc.predicted_loss,
               **{f"{k}_loss": v["loss"] for k, v in got.items()}, "uniform_dims": uniform_dims,
               "allocated_minus_uniform": d["delta_log_ppl"], "se": d["se"], "windows": d["windows"]}
        out["budgets"].append(row)
        print(json.dumps(row), flush=True)
    for r in out["spread"]:
        print(f"ρ {r['ratio']:g}: χ² {r['chi2']:.1f} on {r['df']} df; most layer {r['most']}, least layer "
              f"{r['least']}, gap {r['gap_in_se']:.1f} SE", flush=True)
    if args.json:
        write_json(out, args.json)


if __name__ == "__main__":
    main()
