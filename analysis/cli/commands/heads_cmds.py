"""heads: state-rank stratification of every layer's heads, its stability across inputs, and each head's cost;
and the head flags of `prune` (--heads, --head-counts, --head-strategy) and `sweep` (--axis, --budgets)."""
from __future__ import annotations

from analysis.cli.commands.checks import number_list, real, whole
from analysis.cli.commands.common import calib_of, emit, load, require_text_model
from analysis.cli.commands.progress import bar, fraction, say
from analysis.errors import AnalysisError

RATIO = real(0, 1, hi_open=True)


def _setup_heads(p):
    from analysis.defaults import HEAD_TEXTS
    p.add_argument("--texts", help="comma-separated inputs the split is computed on: bundled splits (test, wiki, ...), "
                                   "random-ids (random token ids), recall (a recall model's own sequences) or text "
                                   f"file paths (default {','.join(HEAD_TEXTS)}; a recall model: "
                                   "recall,recall,random-ids)")
    p.add_argument("--tokens", type=whole(2, 1 << 16), default=256, help="tokens per sequence")
    p.add_argument("--sequences", type=whole(1, 1024), default=4, help="sequences (consecutive windows) per input")
    p.add_argument("--measure", type=whole(0, 4096), default=0,
                   help="also remove each head alone and measure Δ loss with its paired SE on this many "
                        "validation windows (0: no)")
    p.add_argument("--seed", type=whole(0), default=0)
    from analysis.cli.commands.executor_args import add_executor_args
    add_executor_args(p)  # where --measure's points (one per head) run


def run_heads(args) -> None:
    from analysis.models import limits
    from analysis.cli.commands.executor_args import executor_of
    from analysis.runs.head_study import heads_study
    executor = executor_of(args, connect=bool(args.measure))
    if executor.on_ray and not args.measure:
        raise AnalysisError("--executor ray runs --measure's points (one per head); add --measure N, or drop "
                            "--executor.")
    model, tokenizer, meta = load(args)
    texts = None if args.texts is None else [t.strip() for t in args.texts.split(",") if t.strip()]
    limits.check_forward(model, args.sequences, args.tokens, "Reading each input")
    with fraction(args, "heads: states of every head on each input") as progress:
        report = heads_study(model, tokenizer, texts, args.tokens, args.sequences, args.seed, args.measure,
                             progress=progress, executor=executor)
    report = {**meta, **report, **({"executor": executor.kind} if args.measure else {})}
    lines = [f"state-rank stratification, {args.sequences}×{args.tokens} tokens of: " + "; ".join(report["texts"]),
             f"split: {report['split_rule']}"]
    for layer in report["layers"]:
        groups = " ".join(f"{h['head']}:{h['group']}{'' if h['same_on_all_texts'] else '*'}" for h in layer["heads"])
        kappa = "n/a" if layer["kappa"] is None else f"{layer['kappa']:.2f}"
        lines.append(f"layer {layer['layer']} (block {layer['block']}): {groups}  agreement "
                     f"{layer['agreement']:.0%}, chance-corrected agreement a {kappa}")
        if "removal" in layer["heads"][0]:
            lines.append("  removed alone, Δ nats/token ± SE: " + ", ".join(
                f"{h['head']}: {h['removal']['delta']:+.4f} ± {h['removal']['se'] or 0:.4f}" for h in layer["heads"]))
    lines += ["(* = not the same group on every input)", *report["notice"]]
    emit(args, report, "\n".join(lines))


def pruning_heads(args) -> bool:
    if getattr(args, "heads", None) is not None and getattr(args, "head_counts", None) is not None:
        raise AnalysisError("Give either --heads (one ratio of heads for every layer) or --head-counts (one count per "
                            "layer), not both.")
    return getattr(args, "heads", None) is not None or getattr(args, "head_counts", None) is not None


def add_head_args(p) -> None:
    """--heads / --head-counts / --head-strategy: whole heads removed (analysis.shrink.heads.prune)."""
    from analysis.defaults import DEFAULT_HEAD_STRATEGY, HEAD_STRATEGY_NAMES
    p.add_argument("--heads", type=RATIO, help="fraction of each linear layer's value heads to remove (each layer "
                                               "keeps the expressible count nearest its heads × (1 − ratio))")
    p.add_argument("--head-counts", type=number_list(0, 1 << 20, integer=True),
                   help="comma-separated value heads to KEEP per linear-attention layer")
    p.add_argument("--head-strategy", default=DEFAULT_HEAD_STRATEGY,
                   help=f"how heads are chosen: {', '.join(HEAD_STRATEGY_NAMES)}")


def head_strategy_of(args):
    if not pruning_heads(args):
        return None
    from analysis.shrink.heads.strategies import get_head_strategy
    return get_head_strategy(args.head_strategy)


def head_plan_of(args, model, head_strategy):
    """The HeadPlan of --heads / --head-counts (every bad count one sentence, before any work), or None."""
    if head_strategy is None:
        return None
    from analysis.shrink.heads.prune import HeadPlan, plan_head_counts
    counts = plan_head_counts(model, ratio=args.heads, counts=args.head_counts)  # unchanged: refused by `prune`
    return HeadPlan(head_strategy.name, tuple(counts))


def add_budget_args(p) -> None:
    """sweep --axis / --head-strategies / --budgets: heads vs dk at equal state budgets."""
    from analysis.defaults import HEAD_STRATEGY_NAMES
    p.add_argument("--axis", choices=["dk", "heads", "both"],
                   help="fewer heads or smaller keys? plans at equal state budgets (--budgets): dk (channel "
                        "strategies), heads (head strategies) or both (and mixed plans), with paired SEs")
    p.add_argument("--head-strategies", default=",".join(HEAD_STRATEGY_NAMES), help="with --axis heads/both")
    p.add_argument("--budgets", type=number_list(0, 1, hi_open=True), default=[0.75, 0.5, 0.25],
                   help="with --axis: fractions of the recurrent state kept")


def run_budget_sweep(args) -> None:
    from analysis.evaluate.measure import Evaluation
    from analysis.runs.budget_sweep import budget_sweep, check_plans, plans
    from analysis.cli.commands.executor_args import executor_of
    if args.recover_steps:
        raise AnalysisError("--axis runs without recovery; drop --recover-steps.")
    if getattr(args, "tasks", None):
        raise AnalysisError("--axis scores plans by perplexity only; drop --tasks, or sweep without --axis.")
    strategies = args.strategies.split(",")
    head_strategies = args.head_strategies.split(",")
    executor = executor_of(args)
    model, tokenizer, meta = load(args)
    require_text_model(model, tokenizer, "sweep")
    check_plans(model, args.axis, strategies, head_strategies, args.budgets)
    todo = plans(args.axis, strategies, head_strategies, args.budgets)
    results = []
    with bar(args, f"sweep --axis {args.axis} ({executor.kind}): plans", total=len(todo) + 1, unit="point") as b:
        for point in budget_sweep(model, tokenizer, args.axis, strategies, head_strategies, args.budgets,
                                  Evaluation(args.split, args.context, args.eval_tokens), calib_of(args),
                                  args.rescale, use_cache=not args.no_cache, executor=executor):
            results.append(point)   # with its window losses: any two plans can be compared paired
            b.update()
            paired = "" if point["kind"] == "unpruned" else \
                f" Δ log ppl {point['delta_log_ppl']:+.4f} ± {point['se']:.4f}"
            say(args, f"{point['kind']:>8s} {point['strategy']:>7s} {point['head_strategy']:>9s} budget "
                      f"{point['budget']:.2f}: state {point['state_fraction']:.3f}, ppl {point['perplexity']:.2f}"
                      f"{paired}" + (" [cached]" if point["cached"] else ""))
    order = {p: i for i, p in enumerate(todo)}  # Ray's finishing order → the plans' order
    results.sort(key=lambda p: -1 if p["kind"] == "unpruned" else
                 order[(p["kind"], p["strategy"], p["head_strategy"], p["budget"])])
    emit(args, {**meta, "axis": args.axis, "budgets": args.budgets, "executor": executor.kind,
                "paired": "Δ log perplexity vs the unpruned model, mean ± standard error over the same test windows "
                          "(window_losses: each window's mean nats per token, for any other paired comparison)",
                "results": results}, "")


COMMANDS = {
    "heads": ("state-rank stratification of the heads (low-/high-rank groups), its stability across inputs, and "
              "each head's removal cost", _setup_heads, run_heads),
}
