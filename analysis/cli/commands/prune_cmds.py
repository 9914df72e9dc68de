"""importance, prune, ppl, latency, sweep: shrink a model and measure what it costs and gains."""
from __future__ import annotations


from analysis.archs.kernels import MAX_KEY_DIM
from analysis.cli.commands.checks import number_list, real, whole
from analysis.cli.commands.common import (add_calib_args, add_yes_arg, announce, calib_of, emit, load,
                                          require_text_model)
from analysis.cli.commands.executor_args import add_executor_args, executor_of
from analysis.cli.commands.heads_cmds import (add_budget_args, add_head_args, head_plan_of, head_strategy_of,
                                              pruning_heads, run_budget_sweep)
from analysis.cli.commands.progress import bar, fraction, say
from analysis.cli.commands.recovery_args import (add_recovery_args, check_recovery_state, recover_for_cli,
                                                 recovery_settings)
from analysis.errors import AnalysisError


RATIO = real(0, 1, hi_open=True)
RATIOS = number_list(0, 1, hi_open=True)


def _ratios(args):
    if args.ratio is not None and args.ratios is not None:
        raise AnalysisError("Give either --ratio (one ratio for all layers) or --ratios (one per layer), not both.")
    heads = pruning_heads(args)
    if getattr(args, "allocate", None):  # --ratio/--ratios then name "your plan", measured beside the allocator's
        if heads:
            raise AnalysisError("--allocate chooses key dims only; drop --heads / --head-counts, or --allocate.")
        if args.strategy is None:
            raise AnalysisError("--allocate chooses key dims for a channel strategy; give --strategy.")
        return None, None
    if args.ratio is None and args.ratios is None:
        if heads:
            return 0.0, None   # heads only: every key channel stays
        raise AnalysisError("Give --ratio (one ratio for all layers) or --ratios (one per layer), or --heads / "
                            "--head-counts to remove whole heads.")
    if args.strategy is None:
        raise AnalysisError("Shrinking the key dim (--ratio / --ratios) needs a channel strategy; give --strategy.")
    return (None, args.ratios) if args.ratios is not None else (args.ratio, None)


def _rescale_arg(p):
    from analysis.defaults import RESCALES
    p.add_argument("--rescale", choices=list(RESCALES), default="original",
                   help="readout scale of the pruned layers: " + "; ".join(f"{k}: {v}" for k, v in RESCALES.items()))


def _setup_importance(p):
    p.add_argument("--strategies", default="random,l1,wanda,grad,pca,drrqr")
    p.add_argument("--ratio", type=RATIO, default=0.5, help="ratio at which kept sets are compared")
    add_calib_args(p)


def run_importance(args) -> None:
    from analysis.shrink.importance import importance_report
    model, tokenizer, meta = load(args)  # calibration reads text, or a recall model's own recall sequences
    with fraction(args, "importance: strategies scored") as progress:
        report = importance_report(model, tokenizer, args.strategies.split(","), args.ratio, calib_of(args),
                                   progress=progress)
    report = {**meta, **report}
    lines = [f"channel importance, {report['calibration']}; kept sets at ratio {args.ratio}",
             "mean Jaccard agreement of kept sets (all layers and heads):"]
    names = report["strategies"]
    lines.append(" " * 8 + "".join(f"{n:>8s}" for n in names))
    for a, row in zip(names, report["agreement"]):
        lines.append(f"{a:>8s}" + "".join(f"{v:8.2f}" for v in row))
    lines += [f"not scored: {why}" for why in report["refused"].values()]
    emit(args, report, "\n".join(lines))


OUT_HINT = "choose a new --out directory or pass --overwrite"


def _setup_prune(p):
    p.add_argument("--strategy", help="channel strategy (needed with --ratio / --ratios)")
    p.add_argument("--ratio", type=RATIO, help="one ratio for all layers")
    p.add_argument("--ratios", type=RATIOS, help="comma-separated ratio per layer")
    p.add_argument("--round-to", type=int, choices=[16, 32, 64], help="round kept key dims to a multiple")
    p.add_argument("--out", required=True, help="new directory for the pruned model")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out if it is a model directory this tool wrote (nothing else is ever replaced)")
    p.add_argument("--eval-tokens", type=whole(1), default=8192, help="test tokens for the before/after perplexity")
    p.add_argument("--eval-context", type=whole(1), default=256, help="context of the before/after perplexity")
    p.add_argument("--recall-sequences", type=whole(1), default=64,
                   help="recall models: sequences per pair count for the before/after recall accuracy")
    p.add_argument("--time-kernel", action="store_true",
                   help="also time the recurrence kernel before and after (every layer at its key dim)")
    add_head_args(p)
    add_recovery_args(p)
    _rescale_arg(p)
    add_calib_args(p)
    add_yes_arg(p)
    from analysis.cli.commands.sensitivity_cmds import add_allocate_args
    add_allocate_args(p)
    from analysis.cli.commands.eval_cmds import add_task_args
    add_task_args(p, prefix="task-")


def run_prune(args) -> None:
    from analysis.cli.commands.eval_cmds import task_settings
    from analysis.data import inputs
    from analysis.shrink.calibration import sequences_only
    from analysis.models.key_plan import plan_key_dims, tiles
    from analysis.shrink.prune_run import PruneRun, unchanged
    from analysis.shrink.prune_workflow import Evaluation, prune_and_measure, recall_pairs
    from analysis.io.writes import check_new_dir
    from analysis.shrink.strategies import get_strategy
    ratio, ratios = _ratios(args)
    if executor_of(args, connect=bool(args.allocate)).on_ray and not args.allocate:
        raise AnalysisError("--executor ray runs --allocate's map and plan measurements; without --allocate there is "
                            "one model to measure: drop --executor.")
    check_new_dir(args.out, args.overwrite, OUT_HINT)  # before any work: never replaces what we did not write
    check_recovery_state(args)  # and never uses a model or anything of yours as the recovery state
    strategy = get_strategy(args.strategy) if args.strategy is not None else None
    head_strategy = head_strategy_of(args)
    model, tokenizer, meta = load(args)
    task = inputs.recall_task(model)
    if task is None:
        require_text_model(model, tokenizer, "prune")
    else:  # a recall model reads its own recall sequences and is measured on recall accuracy, as on the page
        tokenizer = None
        if args.recover_steps:
            raise AnalysisError(f"{model.analysis_name} is an associative-recall model without a tokenizer, and "
                                "recovery trains on text; drop --recover-steps.")
    heads = head_plan_of(args, model, head_strategy)
    _check_prune_sizes(args, model, strategy, head_strategy if heads else None)
    allocation = None
    if args.allocate:  # per-layer ratios from the sensitivity map (see analysis/shrink/allocate.py)
        from analysis.cli.commands.sensitivity_cmds import allocation_for, allocation_report
        allocation = allocation_for(args, model, tokenizer)
        ratio, ratios = None, allocation[2]["ratios"]  # the plan that measured best (validation split)
    dims = plan_key_dims(model, ratio=ratio, ratios=ratios, round_to=args.round_to)
    if refusal := unchanged(model, dims, ratio, ratios, args.round_to, heads and heads.counts):  # as the page
        raise AnalysisError(refusal)
    evaluation = Evaluation("test", args.eval_context, args.eval_tokens, recall_pairs(task), args.recall_sequences,
                            latency=args.time_kernel, tasks=task_settings(args), confirmed=args.yes)
    evaluation = evaluation.loaded()  # task names and data checked before the prune
    calib = None
    if strategy is not None and strategy.needs_calibration:
        with bar(args, "prune: calibration", total=1, unit="step") as b:
            calib = calib_of(args).calibrate(model, tokenizer)
            b.update()
    elif heads and head_strategy.needs_calibration:  # the head scores read the sequences, not channel statistics
        calib = sequences_only(model, tokenizer, args.calib_sequences, args.calib_tokens, args.seed)
    with fraction(args, "prune: pruning, then the test measurements before and after") as progress:
        done = prune_and_measure(model, tokenizer, args.strategy, dims, calib, evaluation, seed=args.seed,
                                 rescale=args.rescale, progress=progress, heads=heads)
    result, before, after = done.pruned, done.before, done.after
    run = PruneRun.of(result, model, meta["source"], ratios or ratio, before, after, evaluation, calib and calib.label)
    if allocation:
        run.allocation = allocation_report(args, model, tokenizer, *allocation)
    if args.recover_steps:
        recovered = recover_for_cli(args, result.model, tokenizer, teacher=model, evaluation=evaluation)
        run = run.recovered(recovered.recovery.model, recovered.measured, recovered.recovery.metadata())
    run.save(args.out, tokenizer, overwrite=args.overwrite, exists_hint=OUT_HINT)
    payload = {**run.metadata()["evaluation"], "out": args.out}
    lines = [f"{args.strategy}: key dims {result.original_dims} -> {dims} (tiles/head {tiles(dims)}), "
             f"{payload['readout']}; calibration: {payload['calibration']}", _quality_line(before, after),
             *_task_lines(before, after)]
    if heads is not None:
        h = payload["heads"]
        lines[0 if dims == result.original_dims else 1:1] = [
            f"{h['strategy']} heads: value heads per layer {[c[1] for c in h['head_counts_before']]} -> "
            f"{[c[1] for c in h['head_counts']]} (kept {h['kept_value_heads']}); state "
            f"{before['state_bytes_per_sequence']:,} -> {after['state_bytes_per_sequence']:,} bytes per sequence; "
            f"calibration: {payload['calibration']}"]
    if "kernel" in after:
        lines.append(f"kernel time (all layers, {after['kernel']['op']}): {before['kernel']['median_ms']:.3f} ms -> "
                     f"{after['kernel']['median_ms']:.3f} ms ({after['kernel']['device_name']})")
    if args.recover_steps:
        rec = payload["recovery"]
        lines.append(f"after {args.recover_steps} {rec['method']} recovery steps (kept step {rec['kept_step']}, "
                     f"validation perplexity {rec['start_validation_perplexity']:.2f} -> "
                     f"{rec['kept_validation_perplexity']:.2f}): test perplexity {payload['perplexity_recovered']['perplexity']:.2f}")
    lines.append(f"saved {args.out}")
    emit(args, payload, "\n".join(lines))


def _quality_line(before: dict, after: dict) -> str:
    if "recall" in after:
        pairs = zip(before["recall"]["by_pairs"], after["recall"]["by_pairs"])
        return "recall accuracy " + ", ".join(f"{b['pairs']} pairs {b['accuracy']:.3f} -> {a['accuracy']:.3f}"
                                              for b, a in pairs)
    b, a = before["perplexity"], after["perplexity"]
    return (f"test perplexity {b['perplexity']:.2f} -> {a['perplexity']:.2f} "
            f"({a['tokens']} tokens, context {a['context']}, {a['dataset']})")


def _task_lines(before: dict, after: dict) -> list[str]:
    lines = []
    for name, b in before.get("tasks", {}).items():
        a = after["tasks"][name]
        if b.get("accuracy") is not None:
            lines.append(f"{name}: {b['metric']} {b['accuracy']:.4f} ± {b['accuracy_stderr'] or 0:.4f} -> "
                         f"{a['accuracy']:.4f} ± {a['accuracy_stderr'] or 0:.4f} ({a['docs']:,} docs, "
                         f"{a['num_fewshot']}-shot, {after['harness']})")
    return lines


def _check_prune_sizes(args, model, strategy, head_strategy=None) -> None:
    """Calibration and recovery memory, and the recovery's time, before the first step (not after the prune)."""
    from analysis.data import inputs
    from analysis.models import limits
    channels = strategy is not None and strategy.needs_calibration
    if channels:
        calib_of(args).check_size(model)
    if head_strategy is not None and head_strategy.needs_calibration:  # its scoring beside what calibration keeps
        task = inputs.recall_task(model)
        tokens = task.seq_len if task is not None else args.calib_tokens
        held = limits.calibration_kept_bytes(model, args.calib_sequences, tokens) if channels else 0
        head_strategy.check_memory(model, args.calib_sequences, tokens, held)
    if args.recover_steps:
        from analysis.shrink.recovery import check_settings, check_sizes
        settings = recovery_settings(args)
        check_settings(model, settings, teacher=model)  # the pruned model is checked again (its narrower widths)
        check_sizes(model, settings, args.yes, announce)


def _setup_ppl(p):
    p.add_argument("--split", default="test", help="test, validation, train, wiki, or recall (recall models)")
    p.add_argument("--text", metavar="FILE", help="score your own UTF-8 text file instead of a bundled split")
    p.add_argument("--role", choices=("map", "choice", "held-out"), default=None,
                   help="with --text: score only this role's documents (the file is split by whole documents in "
                        "order, about 20%% map / 40%% choice / the rest held-out; docs/held-out.md)")
    p.add_argument("--context", type=whole(1), default=256)
    p.add_argument("--stride", type=whole(1), default=None, help="default: the context (non-overlapping)")
    p.add_argument("--max-tokens", type=whole(1), default=None)
    add_yes_arg(p)


def run_ppl(args) -> None:
    from analysis.evaluate.perplexity import perplexity
    model, tokenizer, meta = load(args)
    if args.split == "recall":
        from analysis.evaluate.recall_eval import recall_report
        payload = {**meta, **recall_report(model)}
        human = "\n".join(f"{r['pairs']:4d} pairs: accuracy {r['accuracy']:.3f}" for r in payload["by_pairs"])
        emit(args, payload, human)
        return
    require_text_model(model, tokenizer, "ppl")
    text, label = _ppl_text(args, tokenizer)
    what = (f"{args.role} documents of your text" if args.role else "your text") if label else f"{args.split} split"
    with fraction(args, f"ppl: {what}") as progress:
        payload = {**meta, **perplexity(model, tokenizer, args.split, args.context, args.stride, args.max_tokens,
                                        text=text, progress=progress, yes=args.yes, say=announce)}
    if label:
        payload.update({"dataset": label, "role": args.role})
    human = (f"perplexity {payload['perplexity']:.3f}, {payload['bits_per_byte']:.4f} bits/byte on "
             f"{payload['dataset']} ({payload['tokens']} tokens, context {payload['context']}, "
             f"stride {payload['stride']}, {payload['device']} {payload['dtype']})")
    if "note" in payload:
        human += f"\nnote: {payload['note']}"
    emit(args, payload, human)


PPL_TEXT_CHARS = 32_000_000  # `ppl --text`: a file is read whole (its roles need every document)


def _ppl_text(args, tokenizer) -> tuple[str | None, str | None]:
    """(text, label) of `--text FILE [--role R]`, or (None, None) for a bundled split."""
    if args.text is None:
        if args.role:
            raise AnalysisError("--role picks the documents of your own text: give the file with --text (the bundled "
                                "splits already have their roles, docs/held-out.md).")
        return None, None
    from analysis.data.inputs import resolve_text
    source = resolve_text(text_file=args.text)
    text, whole_file = source.prefix(PPL_TEXT_CHARS)
    if not whole_file:  # encoding it would take minutes and gigabytes; the roles need every document
        raise AnalysisError(f"{source.label} is longer than {PPL_TEXT_CHARS:,} characters; score a smaller file (or a "
                            "part of it).")
    if args.role is None:
        return text, source.label
    from analysis.data.roles import TextRole, role_part
    text, which = role_part(text, tokenizer, TextRole(args.role))
    return text, f"{source.label}, {which}"


def _setup_latency(p):
    p.add_argument("--key-dims", type=number_list(1, MAX_KEY_DIM, integer=True), default=[16, 32, 48, 64],
                   help=f"comma-separated key dims for the kernel sweep (1..{MAX_KEY_DIM}; the model's kernel "
                        "may allow fewer, e.g. a minimum on GPU)")
    p.add_argument("--batch", type=whole(1), default=4)
    p.add_argument("--tokens", type=whole(1), default=1024)
    p.add_argument("--threads", type=whole(1, 1024), default=None,
                   help="CPU intra-op threads while timing (default 1: stable times on a shared machine)")
    p.add_argument("--repeats", type=whole(1, 10000), default=None,
                   help="timed repeats per point (default 15 on CPU, 50 on CUDA)")


def run_latency(args) -> None:
    from analysis.archs import adapter_for
    from analysis.evaluate.latency import kernel_latency, model_latency, summary
    from analysis.models.load import describe
    from analysis.models import limits
    model, _, meta = load(args)
    info = describe(model)
    dims = args.key_dims
    limits.check_forward(model, args.batch, min(args.tokens, 256), "The whole-model forward")
    timing = dict(threads=args.threads, repeats=args.repeats)
    with bar(args, "latency: kernel per key dim, then the model", total=len(dims) + 1, unit="timing") as b:
        points = []
        for point in kernel_latency(dims, args.batch, args.tokens, info.value_heads, info.head_v_dim,
                                    device=info.device, kernel=adapter_for(model).kernel, **timing):
            points.append(point)
            b.update()
        whole = model_latency(model, batch=args.batch, tokens=min(args.tokens, 256), **timing)
        b.update()
    payload = {**meta, "kernel": points, "model_forward": whole}
    lines = [f"{points[0]['op']} kernel, B{args.batch} T{args.tokens} H{info.value_heads} dv{info.head_v_dim}, "
             f"{points[0]['dtype']} on {points[0]['device_name']} ({points[0]['timer']})"]
    lines += [f"  dk {p['key_dim']:4d} ({p['tiles']} tile{'s' if p['tiles'] > 1 else ''}): {summary(p)}" for p in points]
    lines.append(f"model forward B{whole['batch']} T{whole['tokens']}: {summary(whole)}")
    noisy = sum(p["noisy"] for p in points) + whole["noisy"]
    if noisy:
        lines.append(f"{noisy} measurement(s) are noisy (IQR above 20 % of the median): the machine is busy; "
                     "time again or raise --repeats.")
    emit(args, payload, "\n".join(lines))


def _setup_sweep(p):
    p.add_argument("--strategies", default="random,l1,wanda,grad,pca,drrqr")
    p.add_argument("--ratios", type=RATIOS, default=[0.25, 0.5, 0.75])
    p.add_argument("--split", default="test")
    p.add_argument("--context", type=whole(1), default=256)
    p.add_argument("--eval-tokens", type=whole(1), default=8192)
    p.add_argument("--recover-steps", type=whole(0), default=0)
    p.add_argument("--no-latency", action="store_true")
    p.add_argument("--no-cache", action="store_true", help="recompute even if cached")
    add_executor_args(p)
    add_budget_args(p)
    _rescale_arg(p)
    add_calib_args(p)
    add_yes_arg(p)
    from analysis.cli.commands.eval_cmds import add_task_args
    add_task_args(p, prefix="task-")


def run_sweep(args) -> None:
    from analysis.cli.commands.eval_cmds import task_settings
    from analysis.evaluate.measure import Evaluation
    from analysis.runs.sweep import sweep
    executor = executor_of(args, connect=False)  # --address without --executor ray: one sentence before the model loads
    if args.axis:
        return run_budget_sweep(args)
    strategies = args.strategies.split(",")
    model, tokenizer, meta = load(args)
    require_text_model(model, tokenizer, "sweep")
    ratios = args.ratios
    order = {("unpruned", 0.0): -1, **{(s, r): i for i, (s, r) in enumerate((s, r) for s in strategies for r in ratios)}}
    results = []
    with bar(args, f"sweep ({args.executor}): points", total=len(order), unit="point") as b:
        evaluation = Evaluation(args.split, args.context, args.eval_tokens, latency=not args.no_latency,
                                tasks=task_settings(args), confirmed=args.yes)
        for point in sweep(model, tokenizer, strategies, ratios, evaluation, calib_of(args), args.recover_steps,
                           args.rescale, executor=executor, use_cache=not args.no_cache, say=announce):
            results.append(point)
            b.update()
            extra = "" if point["strategy"] == "unpruned" else f" ({point['delta_vs_unpruned']:+.1%})"
            accuracy = "".join(f", {name} {row['metric']} {row['accuracy']:.3f} ± {row['accuracy_stderr'] or 0:.3f}"
                               for name, row in point.get("tasks", {}).items() if row.get("accuracy") is not None)
            say(args, f"{point['strategy']:>9s} ratio {point['ratio']:.2f} dk {point['head_k_dims']}: "
                      f"ppl {point['perplexity']:.2f}{extra}{accuracy}" + (" [cached]" if point["cached"] else ""))
    results.sort(key=lambda p: order[(p["strategy"], p["ratio"])])  # Ray's finishing order → the plan's order
    emit(args, {**meta, "executor": args.executor, "results": results}, "")


COMMANDS = {
    "importance": ("per-channel scores of every strategy and agreement of their kept sets",
                   _setup_importance, run_importance),
    "prune": ("prune query/key channels (uniform or per-layer ratios) and/or whole heads into a new saved model",
              _setup_prune, run_prune),
    "ppl": ("perplexity and bits per byte on a bundled split (or recall accuracy)", _setup_ppl, run_ppl),
    "latency": ("recurrence-kernel latency vs key dim and whole-model forward latency", _setup_latency, run_latency),
    "sweep": ("perplexity (and with --tasks downstream accuracy) of strategies × ratios, cached; one line per result "
              "as it finishes (--axis: heads vs dk at equal state budgets)", _setup_sweep, run_sweep),
}
