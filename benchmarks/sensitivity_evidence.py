"""Evidence for the allocator: uniform vs rank-suggested vs sensitivity-allocated at equal mean ratio.

For each bundled sample and mean ratio ρ̄ ∈ {0.5, 0.75}: the uniform plan, the rank-suggested plan
(analysis.suggest from the map's per-layer rank utilization) and the sensitivity allocation (same state
bytes as uniform, from the shipped map of each strategy), each pruned with every strategy in STRATEGIES
(the allocation: with the strategies that have a shipped map) and measured on the TEST split (the maps
are measured on the validation split). The best strategy per plan is reported, plus the allocation's
predicted vs measured loss on the map's own (validation) measurement.

    nice .venv/bin/python benchmarks/sensitivity_evidence.py deltanet-small [gated-deltanet-small deltanet-recall]

Results are merged into sample_models/results/sensitivity-evidence.json (one entry per model).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import analysis  # noqa: E402,F401
from analysis import models  # noqa: E402
from analysis.allocate import allocate, candidates, choose, measure_plan  # noqa: E402
from analysis.evaluate import perplexity  # noqa: E402
from analysis.prune import prune  # noqa: E402
from analysis.recall import RecallTask, recall_accuracy  # noqa: E402
from analysis.report import write_json  # noqa: E402
from analysis.sensitivity import MapSettings, calibration_for, recall_task, shipped_map_path  # noqa: E402
from analysis.strategies import get_strategy  # noqa: E402

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
            choice = choose(plans, lambda p, s=strategy, m=smap: measure_plan(
                model, tok, m, p["ratios"], s, m["baseline"], task, calibration(s, m["settings"])))
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


def table(models_: dict) -> tuple[list[dict], str]:
    out = []
    for name, m in models_.items():
        for row in m["rows"]:
            b = row["best"]
            cell = {"model": name, "mean ρ": row["target"], "plan": row["plan"], "best strategy": b["strategy"],
                    "dk per layer": " ".join(map(str, b["dims"])), "state bytes": b["state_bytes"],
                    "measured": round(b["value"], 4), "unpruned": round(m["unpruned"], 4)}
            if "predicted_loss" in b:
                cell["predicted vs measured loss (validation)"] = (f"{b['predicted_loss']:+.4f} vs "
                                                                   f"{b['measured_loss']:+.4f}")
            out.append(cell)
    caption = ("measured: " + "; ".join(f"{n}: {m['metric']}" for n, m in models_.items())
               + ". Strategies tried per plan: " + ", ".join(STRATEGIES) + " (allocation: those with a shipped map: "
               + "; ".join(f"{n}: {', '.join(m['maps'])}" for n, m in models_.items()) + "). Maps: each layer alone "
               "at ρ ∈ {0.25, 0.5, 0.75, 0.875}, validation split (recall: seed 4321); loss = Δ log perplexity or "
               "drop in recall accuracy. CPU, float32.")
    return out, caption




def markdown(path: Path = OUT) -> str:
    """The README table from the evidence JSON: `python benchmarks/sensitivity_evidence.py --markdown`."""
    e = json.loads(path.read_text())
    fmt = lambda v: f"{v:.2f}" if v > 1.5 else f"{v:.4f}"  # noqa: E731  perplexity or recall accuracy
    lines = ["| model (unpruned) | mean ρ | plan | best strategy | dk′ per layer | state bytes | measured (best) | "
             "measured with l1 | predicted vs measured loss (validation) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, m in e["models"].items():
        for row in m["rows"]:
            b = row["best"]
            l1 = next((a for a in row["all"] if a["strategy"] == "l1"), None)
            pv = (f"{b['predicted_loss']:+.4f} vs {b['measured_loss']:+.4f}" if "predicted_loss" in b else "–")
            lines.append(f"| {name} ({fmt(m['unpruned'])}) | {row['target']} | {row['plan']} | {b['strategy']} | "
                         f"{' '.join(map(str, b['dims']))} | {b['state_bytes']:,} | **{fmt(b['value'])}** | "
                         f"{fmt(l1['value']) if l1 else '–'} | {pv} |")
    return "\n".join(lines) + "\n\n" + e["caption"]

if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown())
    else:
        main(sys.argv[1:] or ["deltanet-small", "gated-deltanet-small", "deltanet-recall"])
