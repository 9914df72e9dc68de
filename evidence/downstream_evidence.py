"""Downstream accuracy vs pruning ratio of the bundled samples on the local lm-evaluation-harness tasks.

Language models go through the sweep (`analysis.runs.sweep.sweep(..., tasks=...)`, the path of `python -m analysis
sweep --tasks`, cached like every sweep point); the recall model, which the sweep does not take (no text), through
prune + `analysis.evaluate.harness.evaluate_tasks` per point. One JSON per model into --out, then markdown tables:

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python evidence/downstream_evidence.py      # docs/evaluation.md's numbers
    .venv/bin/python evidence/downstream_evidence.py --table sample_models/results/downstream-*.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEXT_TASKS = ("shakespeare_word_order", "shakespeare_next_line")   # at every point
CLOZE_TASKS = ("shakespeare_last_word", "wikipedia_last_word")      # the unpruned model only, every doc: at chance
RECALL_TASKS = ("associative_recall_16_pairs", "associative_recall_32_pairs", "associative_recall_64_pairs")


def measure_text(name: str, strategies, ratios, limit: int, eval_tokens: int) -> dict:
    from analysis.evaluate.harness import TaskSettings
    from analysis.evaluate.measure import Evaluation
    from analysis.models.load import load_model, load_tokenizer
    from analysis.runs.sweep import sweep
    model = load_model(name, device="cpu")
    tokenizer = load_tokenizer(model)
    tasks = TaskSettings(TEXT_TASKS, limit=limit)
    results = []
    for point in sweep(model, tokenizer, list(strategies), list(ratios),
                       Evaluation(max_tokens=eval_tokens, latency=False, tasks=tasks, confirmed=True),
                       say=lambda line: print(line, file=sys.stderr)):
        results.append(point)
        print(f"{name} {point['strategy']} {point['ratio']}: ppl {point['perplexity']:.2f}, " + ", ".join(
            f"{t} {r['accuracy']:.3f}±{r['accuracy_stderr']:.3f}" for t, r in point["tasks"].items()), file=sys.stderr)
    from analysis.evaluate.harness import evaluate_tasks, task_rows
    unpruned = evaluate_tasks(model, tokenizer, TaskSettings(CLOZE_TASKS), yes=True)
    return {"model": name, "path": "sweep --tasks", "tasks": tasks.record(), "results": results,
            "unpruned_only": {"settings": unpruned["settings"], "tasks": task_rows(unpruned)}}


def measure_recall(name: str, strategies, ratios, limit: int) -> dict:
    from analysis.evaluate.harness import TaskSettings, evaluate_tasks, prepare, task_rows
    from analysis.models.load import describe, load_model
    from analysis.shrink.calibration import calibrate
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.strategies import get_strategy
    model = load_model(name, device="cpu")
    plan = prepare(TaskSettings(RECALL_TASKS, limit=limit))
    calib = None
    results = []
    points = [("unpruned", 0.0)] + [(s, r) for s in strategies for r in ratios]
    for strategy, ratio in points:
        pruned = model
        if strategy != "unpruned":
            if get_strategy(strategy).needs_calibration and calib is None:
                calib = calibrate(model, None, 16, 256, 0)
            pruned = prune(model, strategy, plan_key_dims(model, ratio=ratio),
                           calib if get_strategy(strategy).needs_calibration else None, seed=0).model
            pruned.analysis_source, pruned.analysis_name = model.analysis_source, model.analysis_name
        measured = evaluate_tasks(pruned, None, plan, yes=True)
        info = describe(pruned)
        results.append({"strategy": strategy, "ratio": ratio, "head_k_dims": info.head_k_dims,
                        "device": info.device, "dtype": info.dtype, "harness": measured["harness"],
                        "tasks": task_rows(measured)})
        print(f"{name} {strategy} {ratio}: " + ", ".join(f"{t} {r['accuracy']:.3f}" for t, r in
                                                         results[-1]["tasks"].items()), file=sys.stderr)
    return {"model": name, "path": "prune + evaluate_tasks", "tasks": plan.settings.record(), "results": results}


def table(payload: dict) -> str:
    results = payload["results"]
    base = next(r for r in results if r["strategy"] == "unpruned")
    ratios = sorted({r["ratio"] for r in results if r["strategy"] != "unpruned"})
    lines = []
    for task, row in base["tasks"].items():
        head = (f"**{payload['model']}** · `{task}` ({row['metric']} ± the harness's standard error, {row['docs']:,} "
                f"docs, {row['num_fewshot']}-shot; chance {row.get('chance', 'n/a'):.3g}; {base['device']} "
                f"{base['dtype']}) — unpruned {_cell(row)}")
        if "perplexity" in base:
            head += f", test perplexity {base['perplexity']:.2f}"
        lines += [head, "", "| strategy | " + " | ".join(
            f"ρ = {r:g} (dk {next(x['head_k_dims'][0] for x in results if x['ratio'] == r)})" for r in ratios) + " |",
                  "|---|" + "---|" * len(ratios)]
        for strategy in dict.fromkeys(r["strategy"] for r in results if r["strategy"] != "unpruned"):
            cells = [_cell(next(x for x in results if x["strategy"] == strategy and x["ratio"] == r)["tasks"][task])
                     for r in ratios]
            lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
        lines.append("")
    for task, row in (payload.get("unpruned_only") or {}).get("tasks", {}).items():
        lines += [f"**{payload['model']}** · `{task}`, unpruned only: {row['metric']} {_cell(row)} ({row['docs']:,} "
                  f"docs, {row['num_fewshot']}-shot; chance {row.get('chance', 'n/a'):.3g})", ""]
    return "\n".join(lines)


def _cell(row: dict) -> str:
    return f"{row['accuracy']:.3f} ± {row['accuracy_stderr']:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="deltanet-recall,deltanet-small,gated-deltanet-small,granite-h-small")
    parser.add_argument("--strategies", default="random,l1,drrqr")
    parser.add_argument("--ratios", default="0.25,0.5,0.75")
    parser.add_argument("--limit", type=int, default=250, help="docs per task (the first N, a random sample)")
    parser.add_argument("--eval-tokens", type=int, default=4096, help="test tokens for the perplexity beside it")
    parser.add_argument("--out", type=Path, default=ROOT / "sample_models" / "results")
    parser.add_argument("--table", nargs="*", type=Path, help="only print the tables of these JSON files")
    args = parser.parse_args()
    if args.table is not None:
        print("\n".join(table(json.loads(p.read_text())) for p in args.table))
        return
    import analysis
    analysis.ready()
    from analysis.data.inputs import recall_task
    strategies, ratios = args.strategies.split(","), [float(r) for r in args.ratios.split(",")]
    for name in args.models.split(","):
        start = time.perf_counter()
        recall = recall_task(ROOT / "sample_models" / name) is not None
        payload = (measure_recall(name, strategies, ratios, args.limit) if recall
                   else measure_text(name, strategies, ratios, args.limit, args.eval_tokens))
        payload["seconds"] = round(time.perf_counter() - start, 1)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"downstream-{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        print(table(payload))


if __name__ == "__main__":
    main()
