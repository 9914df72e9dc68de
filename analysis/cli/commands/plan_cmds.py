"""plan: a per-layer (or uniform) plan's predicted loss from a sensitivity map, with its uncertainty, state and tiles."""
from __future__ import annotations

from analysis.cli.commands.checks import number_list, real
from analysis.cli.commands.common import add_calib_args, add_yes_arg, announce, emit, load
from analysis.errors import AnalysisError


def _setup_plan(p):
    p.add_argument("--ratio", type=real(0, 1, hi_open=True), help="one ratio for all layers")
    p.add_argument("--ratios", type=number_list(0, 1, hi_open=True), help="comma-separated ratio per layer")
    p.add_argument("--recommend", action="store_true",
                   help="print the recommended plan at --budget (the Prune page's): the allocator's plan when the "
                        "map predicts it better than uniform beyond noise, else uniform")
    p.add_argument("--budget", type=real(0, 1, hi_open=True),
                   help="with --recommend: the state budget as a mean ratio (the uniform plan's state bytes)")
    p.add_argument("--round-to", type=int, choices=[16, 32, 64], help="round kept key dims to a multiple")
    p.add_argument("--strategy", default=None,
                   help="the strategy whose map predicts (default: the --map's, else l1, whose maps ship)")
    p.add_argument("--map", help="a map JSON from `sensitivity --json` (default: the shipped map of the strategy; "
                                 "with --executor, one measured on it when none is shipped)")
    from analysis.cli.commands.executor_args import add_executor_args
    from analysis.cli.commands.sensitivity_cmds import add_map_args
    add_map_args(p, prefix="map-")  # the shipped map is found by its settings; a missing one is measured at them
    add_calib_args(p)  # the calibration's settings included
    add_yes_arg(p)
    add_executor_args(p)  # where a missing map's points run; without it a missing map is refused, never measured
    p.set_defaults(executor=None)


def plan_executor(args):
    """The Executor named by --executor (None when not given: a missing map is then refused, not measured)."""
    from analysis.cli.commands.executor_args import executor_of
    from analysis.io.points import ADDRESS_WITHOUT_RAY
    if args.executor is None:
        if args.address:
            raise AnalysisError(ADDRESS_WITHOUT_RAY)
        return None
    return executor_of(args)


def plan_map(args, model, tokenizer=None, executor=None) -> tuple[dict, str]:
    """(map, where it came from): --map (checked against the model and --strategy), else the shipped map at the
    --map-* settings, else (with an executor) the map measured at them on the executor, its points cached."""
    from analysis.cli.commands.sensitivity_cmds import comma_numbers, map_command, map_settings, read_map
    from analysis.shrink.sensitivity import compute_map, load_shipped
    if args.map:
        if executor is not None and executor.on_ray:
            announce("--map is read, not measured: nothing runs on Ray.")
        return read_map(args.map, args.strategy, model, "predict"), f"--map {args.map}"
    strategy = args.strategy or "l1"
    from analysis.shrink.strategies import get_strategy
    get_strategy(strategy)
    settings, task = map_settings(args, model, strategy, comma_numbers(args.map_ratios, "--map-ratios"), "map_")
    smap = load_shipped(model, model.analysis_name, settings)
    if smap is not None:
        return smap, "shipped"
    if executor is None:
        raise AnalysisError(f"No shipped {strategy} sensitivity map for {model.analysis_name} at these map "
                            f"settings; measure one with {map_command(model, strategy)} and pass --map map.json, "
                            "or add --executor in-process (or ray) to measure it now.")
    from analysis.cli.commands.progress import bar
    from analysis.models.load import describe
    total = 1 + describe(model).layers * len(settings.ratios)
    with bar(args, f"plan: measuring the {strategy} map ({executor.kind})", total=total, unit="point") as b:
        smap = compute_map(model, tokenizer, settings, task, on_point=lambda _p: b.update(), yes=args.yes,
                           say=announce, executor=executor)
    return smap, f"measured ({executor.kind})"


def run_recommend(args) -> None:
    from analysis.shrink.allocate import recommend
    from analysis.shrink.predict import summary
    if args.budget is None or args.ratio is not None or args.ratios is not None:
        raise AnalysisError("--recommend takes --budget (a mean ratio, e.g. 0.5) and no --ratio or --ratios.")
    executor = plan_executor(args)
    model, tokenizer, meta = load(args)
    smap, source = plan_map(args, model, tokenizer, executor)
    rec = recommend(smap, args.budget, args.round_to)
    lines = [f"{meta['model']}: recommended plan at mean ratio {args.budget:g} ({rec['budget']['state_bytes']:,} fp32 "
             f"state bytes per sequence), {smap['strategy']} map ({smap['measure']}; {source})",
             f"ratios {', '.join(f'{r:.4g}' for r in rec['ratios'])} (dk' {rec['head_k_dims']}): {rec['plan']}",
             f"why: {rec['reason']}", summary(rec), f"fit: {rec['fit']}", f"predicts: {rec['predicts']}"]
    emit(args, {**meta, **rec, "map_source": source, "executor": executor.kind if executor else None},
         "\n".join(lines))


def run_plan(args) -> None:
    from analysis.shrink.predict import predict, summary
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.prune_run import unchanged
    if args.recommend:
        return run_recommend(args)
    if args.budget is not None:
        raise AnalysisError("--budget goes with --recommend; to predict a plan give --ratio or --ratios.")
    if (args.ratio is None) == (args.ratios is None):
        raise AnalysisError("Give --ratio (one ratio for all layers) or --ratios (one per layer).")
    executor = plan_executor(args)
    model, tokenizer, meta = load(args)
    dims = plan_key_dims(model, ratio=args.ratio, ratios=args.ratios, round_to=args.round_to)
    if refusal := unchanged(model, dims, args.ratio, args.ratios, args.round_to):  # as `prune` and the page refuse
        raise AnalysisError(refusal)
    smap, source = plan_map(args, model, tokenizer, executor)
    pred = predict(smap, dims, smap["strategy"])
    lines = [f"{meta['model']}: plan dk' {dims} with the {smap['strategy']} map ({smap['measure']}; {source}; unpruned "
             f"{smap['baseline']:.4f})", "layer  dk'   ρ (effective)  loss        ± se      how"]
    for p in pred["per_layer"]:
        loss = "–" if p["loss"] is None else f"{p['loss']:+.5f}"
        se = "–" if p["se"] is None else f"{p['se']:.5f}"
        lines.append(f"{p['layer']:5d}  {p['head_k_dim']:4d}  {p['ratio']:13.3f}  {loss:>10}  {se:>8}  {p['how']}")
    lines += [summary(pred), f"fit: {pred['fit']}", f"interpolation: {pred['interpolation']}",
              f"predicts: {pred['predicts']}"]
    emit(args, {**meta, **pred, "map_source": source, "executor": executor.kind if executor else None},
         "\n".join(lines))


COMMANDS = {
    "plan": ("a plan's predicted Δ perplexity on held-out text (or recall) from a sensitivity map, ± its calibrated "
             "uncertainty, with its state bytes and kernel tiles; --recommend --budget B: the recommended plan",
             _setup_plan, run_plan),
}
