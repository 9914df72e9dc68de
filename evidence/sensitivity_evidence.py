"""Evidence for the allocator: uniform vs rank-suggested vs sensitivity-allocated at equal mean ratio.

For each bundled sample and mean ratio ρ̄ ∈ {0.5, 0.75}: the uniform plan, the rank-suggested plan
(analysis.shrink.suggest from the map's per-layer rank utilization) and the sensitivity allocation (same state
bytes as uniform, from the shipped map of each strategy), each pruned with every strategy in STRATEGIES
and measured on the TEST split. The allocated plan is the one `analysis.shrink.allocate.choose` keeps after
measuring the knapsack plan, uniform and rank-suggested on the VALIDATION split (the map's own
measurement), with the same strategy (from that strategy's shipped map, else the l1 map). Reported per
strategy (like with like) and best per plan, with the knapsack plan's predicted vs measured loss.

    nice .venv/bin/python evidence/sensitivity_evidence.py deltanet-small [gated-deltanet-small deltanet-recall]

Results are merged into sample_models/results/sensitivity-evidence.json (one entry per model).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import analysis  # noqa: E402

analysis.ready()  # the CPU path for fla's ops and the project's model types
from analysis.models import load as models  # noqa: E402
from analysis.shrink.allocate import allocate, candidates, choose_plan  # noqa: E402
from analysis.evaluate.perplexity import perplexity  # noqa: E402
from analysis.shrink.prune import prune  # noqa: E402
from analysis.data.recall import RecallTask, recall_accuracy  # noqa: E402
from analysis.inspect.report import write_json  # noqa: E402
from analysis.shrink.sensitivity import MapSettings, calibration_for, recall_task, shipped_map_path  # noqa: E402
from analysis.shrink.strategies import get_strategy  # noqa: E402

STRATEGIES = ("l1", "wanda", "drrqr")
TARGETS = (0.5, 0.75)
TEST_TOKENS = 4096
RECALL_SEQUENCES, RECALL_SEED = 256, 1234
OUT = Path(__file__).resolve().parent.parent / "sample_models" / "results" / "sensitivity-evidence.json"


def main(names: list[str]) -> None:
    for name in names:
        result = evaluate_model(name)
        evidence = json.loads(OUT.read_text()) if OUT.exists() else {"models": {}}  # others may have written
        evidence["models"][name] = result
        evidence["table"], evidence["caption"] = table(evidence["models"])
        write_json(evidence, str(OUT))
        print(json.dumps(evidence["table"], indent=1), flush=True)


def evaluate_model(name: str) -> dict:
    model = models.load_model(name, device="cpu")
    task = recall_task(model)
    tok = None if task else models.load_tokenizer(model)
    maps = {s: json.loads(shipped_map_path(name, s).read_text()) for s in STRATEGIES
            if shipped_map_path(name, s).exists()}
    any_map = maps.get("l1") or next(iter(maps.values()))
    calib = {}

    def calibration(strategy, smap_settings):
        if not get_strategy(strategy).needs_calibration:
            return None
        if "c" not in calib:
            calib["c"] = calibration_for(model, tok, MapSettings(**{**smap_settings, "ratios": (0.5,)}), task)
        return calib["c"]

    tested: dict[tuple, float] = {}

    def measure(pruned) -> float:
        if task is not None:
            t = RecallTask(task.n_keys, task.n_values, task.n_pairs, task.n_pairs)
            return recall_accuracy(pruned, t, RECALL_SEQUENCES, seed=RECALL_SEED)
        return perplexity(pruned, tok, "test", 256, max_tokens=TEST_TOKENS)["perplexity"]

    def test_value(strategy, dims) -> float:
        key = (strategy, tuple(dims))
        if key not in tested:
            tested[key] = measure(prune(model, strategy, dims, calibration(strategy, any_map["settings"])).model)
        return tested[key]

    base = measure(model)
    rows = []
    for target in TARGETS:
        per_plan = {"uniform": [], "rank-suggested": [], "sensitivity-allocated": []}
        for strategy in STRATEGIES:
            smap = maps.get(strategy, any_map)  # a strategy without a shipped map allocates from the l1 map
            alloc = allocate(smap, mean_ratio=target)
            plans = candidates(smap, alloc, mean_ratio=target)
            choice = choose_plan(model, tok, smap, plans, strategy, task, calibration(strategy, smap["settings"]))
            for c in choice["candidates"]:
                c["test_value"] = test_value(strategy, c["dims"])
            by_name = {c["name"]: c for c in choice["candidates"]}
            for plan in ("uniform", "rank-suggested"):
                c = by_name.get(plan)
                if c is not None:
                    per_plan[plan].append(_entry(strategy, c, any_map))
            won = by_name[choice["winner"]]
            knap = by_name["sensitivity-allocated"]
            per_plan["sensitivity-allocated"].append({
                **_entry(strategy, won, any_map), "map_strategy": smap["strategy"], "chosen": choice["winner"],
                "reason": choice["reason"], "candidates": choice["candidates"],
                "predicted_loss": knap["predicted_loss"], "measured_loss": knap["measured_loss"],
                "knapsack_dims": knap["dims"], "knapsack_test_value": knap["test_value"]})
            print(name, target, strategy, choice["winner"], choice["reason"], flush=True)
        for plan, results in per_plan.items():
            best = (max if task else min)(results, key=lambda r: r["value"])
            rows.append({"target": target, "plan": plan, "best": best, "all": results})
    metric = (f"recall accuracy at {task.n_pairs} pairs, {RECALL_SEQUENCES} synthetic sequences (seed {RECALL_SEED})"
              if task else f"test perplexity, first {TEST_TOKENS:,} tokens of the test split, context 256")
    return {"metric": metric, "unpruned": base, "rows": rows, "map_settings": any_map["settings"],
            "maps": sorted(maps), "device": "cpu", "dtype": "float32"}


def _entry(strategy: str, c: dict, smap: dict) -> dict:
    return {"strategy": strategy, "ratios": [round(r, 4) for r in c["ratios"]], "dims": c["dims"],
            "state_bytes": sum(row["heads"] * d * row["value_dim"] * 4 for row, d in zip(smap["layers"], c["dims"])),
            "value": c["test_value"], "validation_loss": c["measured_loss"]}


def _by_strategy(m: dict) -> list[dict]:
    """Per (ρ̄, strategy): uniform, rank-suggested and allocated (chosen) with the same strategy."""
    out = []
    for target in sorted({r["target"] for r in m["rows"]}):
        plans = {r["plan"]: {a["strategy"]: a for a in r["all"]} for r in m["rows"] if r["target"] == target}
        for strategy, alloc in plans.get("sensitivity-allocated", {}).items():
            out.append({"target": target, "strategy": strategy,
                        "uniform": plans["uniform"].get(strategy), "rank": plans["rank-suggested"].get(strategy),
                        "alloc": alloc})
        best = {r["plan"]: r["best"] for r in m["rows"] if r["target"] == target}  # carries the cross pair
        out.append({"target": target, "strategy": "best of each", "uniform": best["uniform"],
                    "rank": best["rank-suggested"], "alloc": best["sensitivity-allocated"]})
    return out


def table(models_: dict) -> tuple[list[dict], str]:
    out = []
    for name, m in models_.items():
        for r in _by_strategy(m):
            a = r["alloc"]
            cell = {"model": name, "mean ρ": r["target"], "strategy": r["strategy"],
                    "uniform": round(r["uniform"]["value"], 4), "rank-suggested": round(r["rank"]["value"], 4),
                    "allocated (chosen)": round(a["value"], 4),
                    "chosen plan": f"{a.get('chosen', 'knapsack (no choice step)')} ({a['strategy']}"
                                   f"{', ' + a['map_strategy'] + ' map' if 'map_strategy' in a else ''})",
                    "allocated dk′": " ".join(map(str, a["dims"])), "state bytes": a["state_bytes"],
                    "unpruned": round(m["unpruned"], 4)}
            if a.get("predicted_loss") is not None:
                cell["knapsack plan: predicted (map) vs measured loss (validation)"] = (
                    f"{a['predicted_loss']:+.4f} vs {a['measured_loss']:+.4f}")
            out.append(cell)
    caption = ("Each row: the same strategy for all three plans, at the same state bytes (the uniform plan's). "
               "Allocated = the plan `choose_plan` kept after measuring the knapsack plan, uniform and rank-suggested "
               "on the VALIDATION split (language models: first 16,384 tokens, context 256; uniform is kept unless "
               "another plan beats it by more than 2 paired standard errors over windows); the table's values are "
               "on the TEST split. "
               "measured: " + "; ".join(f"{n}: {m['metric']}" for n, m in models_.items())
               + ". Maps shipped: " + "; ".join(f"{n}: {', '.join(m['maps'])}" for n, m in models_.items())
               + "; a strategy without its own map allocates from the l1 map. Maps: each layer alone at ρ ∈ "
               "{0.25, 0.5, 0.75, 0.875}, validation split, 4,096 tokens, context 256 (recall: seed 4321); loss = "
               "Δ log perplexity or drop in recall accuracy; the allocator clamps it at 0 and makes it "
               "non-decreasing in ρ. Paired noise: per-window (16 windows of 256 tokens) difference of mean log-loss "
               "between the two plans on the same test tokens, mean ± standard error (evidence/paired_noise.py). "
               "CPU, float32.")
    return out, caption


def _paired(alloc: dict, uniform: dict) -> str:
    """The paired test difference from evidence/paired_noise.py, or 0 when the chosen plan is uniform's."""
    if (alloc["strategy"], alloc["dims"]) == (uniform["strategy"], uniform["dims"]):
        return "0 (same plan)"
    p = alloc.get("paired_vs_uniform", {}).get(uniform["strategy"])
    return "–" if p is None else f"{p['delta_log_ppl']:+.4f} ± {p['se']:.4f}"


def markdown(path: Path = OUT) -> str:
    """The table of docs/sensitivity.md from the evidence JSON: `python evidence/sensitivity_evidence.py --markdown`."""
    e = json.loads(path.read_text())
    fmt = lambda v: f"{v:.2f}" if v > 1.5 else f"{v:.4f}"  # noqa: E731  perplexity or recall accuracy
    lines = ["| model (unpruned) | mean ρ | strategy | uniform | rank-suggested | allocated (chosen) | chosen plan, "
             "dk′ per layer | allocated − uniform, test Δ log ppl ± SE (paired) | knapsack plan: predicted (map) vs "
             "measured loss (validation) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, m in e["models"].items():
        for r in _by_strategy(m):
            a = r["alloc"]
            pv = f"{a['predicted_loss']:+.4f} vs {a['measured_loss']:+.4f}" if a.get("predicted_loss") is not None \
                else "–"
            chosen = a.get("chosen", "knapsack (no choice step)")
            src = f", {a['map_strategy']} map" if a.get("map_strategy", a["strategy"]) != a["strategy"] else ""
            strat = f"**{r['strategy']}**" if r["strategy"] == "best of each" else r["strategy"]
            lines.append(f"| {name} ({fmt(m['unpruned'])}) | {r['target']} | {strat} | {fmt(r['uniform']['value'])}"
                         f"{'' if r['strategy'] != 'best of each' else ' (' + r['uniform']['strategy'] + ')'} | "
                         f"{fmt(r['rank']['value'])}"
                         f"{'' if r['strategy'] != 'best of each' else ' (' + r['rank']['strategy'] + ')'} | "
                         f"{fmt(a['value'])}{'' if r['strategy'] != 'best of each' else ' (' + a['strategy'] + ')'}"
                         f" | {chosen}{src}: {' '.join(map(str, a['dims']))} | {_paired(a, r['uniform'])} | {pv} |")
    return "\n".join(lines) + "\n\n" + e["caption"]


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown())
    else:
        main(sys.argv[1:] or ["deltanet-small", "gated-deltanet-small", "deltanet-recall"])
