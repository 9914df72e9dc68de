"""Markdown tables of issue 32's evidence from `sample_models/results/` (written by sample_models/heads_evidence.sh):

    python evidence/heads_table.py sample_models/results   # all samples found there

1. Stratification per layer: how far apart the two groups are (the gap as a factor in effective rank, smallest and
   largest over the three inputs), the split's agreement and mean κ across inputs, and each group's removal cost
   (mean over its heads of Δ nats/token when the head alone is removed, ± the standard error over those heads).
2. Equal state budgets: every plan's Δ log perplexity ± paired SE against the unpruned model, and per budget the
   best head plan minus the best dk plan, paired over the same test windows (negative: heads win).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def _mean_se(values: list[float]) -> tuple[float, float | None]:
    n = len(values)
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else None
    return mean, se


def _pm(mean: float, se: float | None, digits: int = 3) -> str:
    return f"{mean:+.{digits}f}" + (f" ± {se:.{digits}f}" if se is not None else "")


def heads_table(path: Path) -> str:
    report = json.loads(path.read_text())
    lines = [f"**{report['model']}** — {report['sequences']} × {report['tokens']} tokens of: "
             f"{'; '.join(report['texts'])}; removal cost on {report['removal']['data']}" if "removal" in report else "",
             "", "| layer | groups apart (× erank) | agreement | mean κ | low-rank heads | Δ removed, low-rank | "
             "Δ removed, high-rank |", "|---|---|---|---|---|---|---|"]
    low_costlier, clear, compared = 0, 0, 0
    for layer in report["layers"]:
        gaps = [s["gap"] for s in layer["splits"] if s.get("gap") is not None]
        clear += bool(gaps) and min(gaps) >= math.log(1.5)
        apart = f"×{math.exp(min(gaps)):.2f}–×{math.exp(max(gaps)):.2f}" if gaps else "n/a"
        cells, means = [], []
        for group in ("low", "high"):
            deltas = [h["removal"]["delta"] for h in layer["heads"] if h["group"] == group and "removal" in h]
            cells.append(_pm(*_mean_se(deltas)) + f" ({len(deltas)})" if deltas else "–")
            means.append(_mean_se(deltas)[0] if deltas else None)
        if None not in means:
            compared += 1
            low_costlier += means[0] > means[1]
        kappa = "n/a" if layer["kappa"] is None else f"{layer['kappa']:.2f}"
        low = ", ".join(str(h["head"]) for h in layer["heads"] if h["group"] == "low")
        lines.append(f"| {layer['layer']} | {apart} | {layer['agreement']:.0%} | {kappa} | {low} | {cells[0]} | "
                     f"{cells[1]} |")
    lines += ["", f"Clear splits (groups ×1.5 or more apart on every input): {clear} of {len(report['layers'])} layers; "
                  f"the low-rank group costs more when removed (mean over its heads) in {low_costlier} of {compared}."]
    return "\n".join(lines)


def _paired(a: list[float], b: list[float]) -> tuple[float, float]:
    return _mean_se([y - x for x, y in zip(a, b, strict=True)])


def budget_table(paths: list[Path]) -> str:
    points = [p for path in paths for p in json.loads(path.read_text())["results"]]
    base = next(p for p in points if p["kind"] == "unpruned")
    plans = [p for p in points if p["kind"] != "unpruned"]
    budgets = sorted({p["budget"] for p in plans}, reverse=True)
    names = list(dict.fromkeys(_name(p) for p in plans))
    head = json.loads(paths[0].read_text())["model"]
    lines = [f"**{head}** — unpruned perplexity {base['perplexity']:.2f} ({base['dataset']}, {base['tokens']:,} "
             f"tokens, context {base['context']}, {base['device']} {base['dtype']}); Δ log ppl ± paired SE "
             "(state kept)", "", "| plan | " + " | ".join(f"budget {b:g}" for b in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    for name in names:
        cells = []
        for b in budgets:
            p = next((x for x in plans if _name(x) == name and x["budget"] == b), None)
            cells.append("–" if p is None else f"{_pm(p['delta_log_ppl'], p['se'])} ({p['state_fraction']:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for b in budgets:
        best = {kind: min((x for x in plans if x["kind"] == kind and x["budget"] == b),
                          key=lambda x: x["delta_log_ppl"], default=None) for kind in ("dk", "heads")}
        if None in best.values() or "window_losses" not in best["dk"]:
            cells.append("–")
            continue
        mean, se = _paired(best["dk"]["window_losses"], best["heads"]["window_losses"])
        cells.append(f"{_pm(mean, se)} ({_name(best['heads'])} − {_name(best['dk'])})")
    lines.append("| **best heads − best dk** | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _name(p: dict) -> str:
    return {"dk": f"dk: {p['strategy']}", "heads": f"heads: {p['head_strategy']}",
            "mixed": f"mixed: {p['strategy']} + {p['head_strategy']}"}[p["kind"]]


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "sample_models/results")
    for path in sorted(folder.glob("heads-*.json")):
        print(heads_table(path), end="\n\n")
        sample = path.stem.removeprefix("heads-")
        budget = [p for p in (folder / f"budget-{sample}.json", folder / f"budget-dk-{sample}.json") if p.is_file()]
        if budget:
            print(budget_table(budget), end="\n\n")
