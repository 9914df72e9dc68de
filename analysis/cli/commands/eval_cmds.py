"""eval: downstream accuracy through lm-evaluation-harness, on any model the tool loads (or saved after a prune).

The local tasks (sample_models/tasks/) need no network; the harness's own tasks read their data sets from the
Hugging Face cache or the hub; --include-path adds your own task YAMLs, as lm-eval's CLI does.
"""
from __future__ import annotations

import argparse

from analysis.cli.commands.checks import whole
from analysis.cli.commands.common import add_yes_arg, announce, calib_of, emit, load, require_text_model
from analysis.cli.commands.progress import fraction
from analysis.errors import AnalysisError

LOCAL_HINT = ("local tasks (no network): shakespeare_word_order, shakespeare_next_line, shakespeare_last_word, "
              "wikipedia_last_word, associative_recall_{16,32,64}_pairs (sample_models/tasks/README.md)")


def task_names(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in str(text).split(","))
    if not any(names) or not all(names):
        raise argparse.ArgumentTypeError(f"must be comma-separated task names without empty entries, got {text!r}")
    return names


def add_task_args(p, *, prefix: str = "") -> None:
    """--tasks and how they are run. `prefix` ("task-") names the options of commands that also measure perplexity
    (sweep, prune), where a bare --limit or --batch-size would be ambiguous; eval takes lm-eval's own names."""
    p.add_argument("--tasks", type=task_names, required=not prefix, metavar="T1,T2",
                   help=f"comma-separated lm-evaluation-harness tasks: {LOCAL_HINT}; or any task of the harness's "
                        "registry (data from the Hugging Face cache or the hub)")
    p.add_argument(f"--{prefix}limit", dest="task_limit", type=whole(1), metavar="N",
                   help="score only the first N docs of each task (default: all)")
    p.add_argument(f"--{prefix}{'fewshot' if prefix else 'num-fewshot'}", dest="task_fewshot", type=whole(0, 1000),
                   metavar="K",
                   help="few-shot examples per doc (default: each task's own, 0 for the local tasks)")
    p.add_argument(f"--{prefix}batch-size", dest="task_batch", type=whole(1, 4096), default=8, metavar="B",
                   help="sequences per forward pass of the harness")
    p.add_argument("--include-path", metavar="DIR", help="a folder of your own lm-eval task YAMLs")
    p.add_argument("--allow-task-code", action="store_true",
                   help="run the Python files that your --include-path task YAMLs name with `!function` (refused "
                        "without it; each file is named on stderr before it runs)")


def task_settings(args):
    """The TaskSettings the arguments name, or None when no --tasks were given."""
    if not getattr(args, "tasks", None):
        if args.include_path or args.allow_task_code or args.task_limit or args.task_fewshot is not None:
            from analysis.errors import AnalysisError
            raise AnalysisError("The task options (limit, few-shot, --include-path, --allow-task-code) apply to "
                                "--tasks; name the tasks with --tasks T1,T2 or drop them.")
        return None
    from analysis.evaluate.harness import TaskSettings
    return TaskSettings(args.tasks, limit=args.task_limit, num_fewshot=args.task_fewshot, batch_size=args.task_batch,
                        include_path=args.include_path, allow_task_code=args.allow_task_code)


def _setup_eval(p):
    from analysis.cli.commands.common import add_calib_args
    from analysis.cli.commands.executor_args import add_executor_args
    add_task_args(p)
    p.add_argument("--plans", metavar="FILE",
                   help="score several plans of this model: a JSON list of per-layer key-dim plans (or "
                        "`plan --recommend --json` output), each pruned with --strategy; the unpruned model and "
                        "each plan are points (cached, resumable, on --executor)")
    p.add_argument("--strategy", default="l1", help="with --plans: the strategy that prunes every plan")
    add_calib_args(p)
    add_yes_arg(p)
    add_executor_args(p)  # where --plans' points (one per plan) run


def run_eval(args) -> None:
    from analysis.cli.commands.executor_args import executor_of
    from analysis.data import inputs
    from analysis.evaluate.harness import evaluate_tasks, prepare
    executor = executor_of(args, connect=bool(args.plans))
    if executor.on_ray and not args.plans:
        raise AnalysisError("--executor ray runs --plans' points (one per plan); eval without --plans scores one "
                            "model here: add --plans FILE, or drop --executor.")
    if args.plans:
        return run_eval_plans(args, executor)
    plan = prepare(task_settings(args))  # names, data and few-shot pools checked before the model loads
    model, tokenizer, meta = load(args)
    if inputs.recall_task(model) is None:
        require_text_model(model, tokenizer, "eval")
    with fraction(args, "eval: lm-evaluation-harness requests") as progress:
        report = evaluate_tasks(model, tokenizer, plan, progress=progress, yes=args.yes, say=announce)
    payload = {**meta, **report}
    emit(args, payload, "\n".join(summary_lines(payload)))


def run_eval_plans(args, executor) -> None:
    """The unpruned model and every plan of --plans, scored on the tasks as points of the executor."""
    from analysis.cli.commands.progress import bar, say
    from analysis.data import inputs
    from analysis.runs.plan_eval import eval_plans, read_plans
    from analysis.shrink.strategies import get_strategy
    settings = task_settings(args)
    get_strategy(args.strategy)  # one sentence before the model loads
    model, tokenizer, meta = load(args)
    if inputs.recall_task(model) is None:
        require_text_model(model, tokenizer, "eval")
    plans = read_plans(args.plans, model)
    results = [None] * (len(plans) + 1)
    with bar(args, f"eval ({executor.kind}): plans", total=len(plans) + 1, unit="point") as b:
        for i, r in eval_plans(model, tokenizer, settings, plans, args.strategy, calib=calib_of(args),
                            executor=executor, yes=args.yes, say=announce):
            results[i] = r  # Ray's finishing order → the file's
            say(args, plan_line(r))
            b.update()
    payload = {**meta, "executor": executor.kind, "strategy": args.strategy, "plans": results}
    lines = [f"{results[0]['harness']} on {meta['model']} ({meta['device']}, {meta['dtype']}), "
             f"{len(plans)} plans pruned with {args.strategy} ({executor.kind}):"] + [plan_line(r) for r in results]
    emit(args, payload, "\n".join(lines))


def plan_line(r: dict) -> str:
    tag = " [cached]" if r.get("cached") else ""
    scores = "; ".join(f"{n} {row['metric']} " + ("–" if row["accuracy"] is None else f"{row['accuracy']:.4f}")
                       + ("" if row["accuracy_stderr"] is None else f" ± {row['accuracy_stderr']:.4f}")
                       for n, row in r["tasks"].items())
    return f"{r['name']} (dk' {r['head_k_dims']}): {scores}{tag}"


def summary_lines(report: dict) -> list[str]:
    lines = [f"{report['harness']} on {report['model']} ({report['device']}, {report['dtype']}), "
             f"max length {report['max_length']} tokens"]
    for name, row in report["tasks"].items():
        value = f"{row['metric']} {row['accuracy']:.4f}" if row["accuracy"] is not None else "no metric"
        if row["accuracy_stderr"] is not None:
            value += f" ± {row['accuracy_stderr']:.4f}"
        chance = f"; chance {row['chance']:.4g}" if "chance" in row else ""
        lines.append(f"{name}: {value} ({row['docs']:,} of {row['docs_total']:,} docs, {row['num_fewshot']}-shot, "
                     f"{row['dataset']}, {row['split']} split{chance})")
    return lines


COMMANDS = {"eval": ("downstream accuracy with lm-evaluation-harness (local tasks offline, the harness's registry, "
                     "or your own task YAMLs)", _setup_eval, run_eval)}
