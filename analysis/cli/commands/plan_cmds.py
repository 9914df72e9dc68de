"""plan: a per-layer (or uniform) plan's predicted loss from a sensitivity map, with its uncertainty, state and tiles."""
from __future__ import annotations

from analysis.cli.commands.checks import number_list, real
from analysis.cli.commands.common import add_calib_args, emit, load
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
    p.add_argument("--map", help="a map JSON from `sensitivity --json` (default: the shipped map of the strategy)")
    add_calib_args(p)  # the shipped map is found by its settings, the calibration's included


def plan_map(args, model) -> dict:
    """--map (checked against the model and --strategy), else the shipped map at the default map settings."""
    from analysis.cli.commands.sensitivity_cmds import map_command, read_map
    from analysis.shrink.sensitivity import DEFAULT_RATIOS, MapSettings, load_shipped, recall_task
    if args.map:
        return read_map(args.map, args.strategy, model, "predict")
    strategy = args.strategy or "l1"
    from analysis.shrink.strategies import get_strategy
    get_strategy(strategy)
    metric = "recall" if recall_task(model) is not None else "ppl"
    settings = MapSettings(strategy, DEFAULT_RATIOS, metric, calib_sequences=args.calib_sequences,
                           calib_tokens=args.calib_tokens, seed=args.seed)
    smap = load_shipped(model, model.analysis_name, settings)
    if smap is None:
        raise AnalysisError(f"No shipped {strategy} sensitivity map for {model.analysis_name} at these map "
                            f"settings; measure one with {map_command(model, strategy)} and pass --map map.json.")
    return smap


def run_recommend(args) -> None:
    from analysis.shrink.allocate import recommend
    from analysis.shrink.predict import summary
    if args.budget is None or args.ratio is not None or args.ratios is not None:
        raise AnalysisError("--recommend takes --budget (a mean ratio, e.g. 0.5) and no --ratio or --ratios.")
    model, _tokenizer, meta = load(args)
    smap = plan_map(args, model)
    rec = recommend(smap, args.budget, args.round_to)
    lines = [f"{meta['model']}: recommended plan at mean ratio {args.budget:g} ({rec['budget']['state_bytes']:,} fp32 "
             f"state bytes per sequence), {smap['strategy']} map ({smap['measure']})",
             f"ratios {', '.join(f'{r:.4g}' for r in rec['ratios'])} (dk' {rec['head_k_dims']}): {rec['plan']}",
             f"why: {rec['reason']}", summary(rec), f"fit: {rec['fit']}", f"predicts: {rec['predicts']}"]
    emit(args, {**meta, **rec}, "\n".join(lines))


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
    model, _tokenizer, meta = load(args)
    dims = plan_key_dims(model, ratio=args.ratio, ratios=args.ratios, round_to=args.round_to)
    if refusal := unchanged(model, dims, args.ratio, args.ratios, args.round_to):  # as `prune` and the page refuse
        raise AnalysisError(refusal)
    smap = plan_map(args, model)
    pred = predict(smap, dims, smap["strategy"])
    lines = [f"{meta['model']}: plan dk' {dims} with the {smap['strategy']} map ({smap['measure']}; unpruned "
             f"{smap['baseline']:.4f})", "layer  dk'   ρ (effective)  loss        ± se      how"]
    for p in pred["per_layer"]:
        loss = "–" if p["loss"] is None else f"{p['loss']:+.5f}"
        se = "–" if p["se"] is None else f"{p['se']:.5f}"
        lines.append(f"{p['layer']:5d}  {p['head_k_dim']:4d}  {p['ratio']:13.3f}  {loss:>10}  {se:>8}  {p['how']}")
    lines += [summary(pred), f"fit: {pred['fit']}", f"interpolation: {pred['interpolation']}",
              f"predicts: {pred['predicts']}"]
    emit(args, {**meta, **pred}, "\n".join(lines))


COMMANDS = {
    "plan": ("a plan's predicted Δ perplexity on held-out text (or recall) from a sensitivity map, ± its calibrated "
             "uncertainty, with its state bytes and kernel tiles; --recommend --budget B: the recommended plan",
             _setup_plan, run_plan),
}
