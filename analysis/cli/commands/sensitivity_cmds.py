"""sensitivity: the layer × ratio map; plus the `prune --allocate sensitivity --budget ...` hook."""
from __future__ import annotations

from pathlib import Path

from analysis.cli.commands.common import add_calib_args, add_yes_arg, announce, emit, load
from analysis.cli.commands.executor_args import add_executor_args, executor_of
from analysis.cli.commands.progress import bar, say
from analysis.errors import AnalysisError
from analysis.io import reads
from analysis.io.writes import show

MAX_MAP_BYTES = 64 << 20  # a map is tens of KiB; far bigger is not one


def comma_numbers(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        raise AnalysisError(f"{what} must be comma-separated numbers, got {show(text, 60)!r}.") from None


def add_map_args(p, prefix: str = "") -> None:
    """Settings of the map (shared by `sensitivity` and `prune --allocate`, where they take a map- prefix)."""
    from analysis.defaults import SENSITIVITY_EVAL_TOKENS as DEFAULT_EVAL_TOKENS
    from analysis.defaults import SENSITIVITY_RATIOS as DEFAULT_RATIOS
    p.add_argument(f"--{prefix}metric", default="auto", choices=["auto", "ppl", "recall"],
                   help="ppl: Δ log perplexity; recall: drop in recall accuracy (auto: recall for a recall model)")
    p.add_argument(f"--{prefix}split", default="validation", help="split the map's perplexity is measured on")
    p.add_argument(f"--{prefix}context", type=int, default=256)
    p.add_argument(f"--{prefix}eval-tokens", type=int, default=DEFAULT_EVAL_TOKENS, help="tokens scored per point")
    p.add_argument(f"--{prefix}recall-pairs", type=int, default=None, help="recall metric: pairs per sequence")
    p.add_argument(f"--{prefix}recall-sequences", type=int, default=256, help="recall metric: sequences per point")
    if prefix:
        p.add_argument("--map-ratios", default=",".join(map(str, DEFAULT_RATIOS)), help="ratios the map measures")


def map_settings(args, model, strategy: str, ratios, prefix: str = ""):
    from analysis.shrink.sensitivity import MapSettings, recall_task
    get = lambda name: getattr(args, prefix + name)  # noqa: E731
    task = recall_task(model)
    metric = get("metric")
    if metric == "auto":
        metric = "recall" if task is not None else "ppl"
    return MapSettings(strategy=strategy, ratios=tuple(ratios), metric=metric, split=get("split"),
                       context=get("context"), eval_tokens=get("eval_tokens"),
                       calib_sequences=args.calib_sequences, calib_tokens=args.calib_tokens, seed=args.seed,
                       recall_pairs=get("recall_pairs"), recall_sequences=get("recall_sequences")), task


def _setup_sensitivity(p):
    p.add_argument("--strategy", required=True)
    p.add_argument("--ratios", default="0.25,0.5,0.75", help="comma-separated ratios; each layer alone at each")
    add_map_args(p)
    p.add_argument("--no-cache", action="store_true", help="recompute even if cached")
    add_calib_args(p)
    add_yes_arg(p)
    add_executor_args(p)


def run_sensitivity(args) -> None:
    from analysis.shrink.number_format import signed  # never "-0.0000"
    from analysis.shrink.sensitivity import compute_map
    executor = executor_of(args)
    model, tokenizer, meta = load(args)
    from analysis.models.load import describe
    s, task = map_settings(args, model, args.strategy, comma_numbers(args.ratios, "--ratios"))
    total = 1 + describe(model).layers * len(s.ratios)  # the unpruned model, then each layer at each ratio

    with bar(args, f"sensitivity ({executor.kind}): map points", total=total, unit="point") as b:
        def show(p):
            tag = " [cached]" if p["cached"] else ""
            if p["layer"] is None:
                say(args, f"unpruned: {p['value']:.4f}{tag}")
            else:
                say(args, f"layer {p['layer']} ratio {p['ratio']:.3f} dk {p['head_k_dim']}: {p['value']:.4f} "
                          f"(loss {signed(p['loss'])}){tag}")
            b.update()

        smap = compute_map(model, tokenizer, s, task, use_cache=not args.no_cache, on_point=show, yes=args.yes,
                           say=announce, executor=executor)
    smap["model"], smap["executor"] = meta["model"], executor.kind
    lines = [f"{meta['model']} ({meta['device']}, {meta['dtype']}), strategy {s.strategy}: {smap['measure']}; "
             f"unpruned {smap['baseline']:.4f}; loss = {smap['loss']}",
             "layer  u      state bytes  " + "".join(f"ρ={r:<9g}" for r in s.ratios)]
    from analysis.shrink.sensitivity import grid
    g = grid(smap)
    for row, losses in zip(smap["layers"], g.losses):
        u = row["rank_utilization"]
        lines.append(f"{row['layer']:5d}  {u if u is None else format(u, '.3f'):5}  {row['state_bytes']:11,d}  "
                     + "".join(f"{signed(x):<11}" if x is not None else "   -       " for x in losses))
    emit(args, {**meta, **smap}, "\n".join(lines))


# ---- prune --allocate sensitivity ----------------------------------------------------------------------

def add_allocate_args(p) -> None:
    p.add_argument("--allocate", choices=["sensitivity"], help="choose per-layer ratios from a sensitivity map")
    p.add_argument("--budget", help="with --allocate: mean ratio (0.5), state bytes (bytes:131072) or tiles (tiles:12); "
                        "or give --ratios instead: your plan, measured beside the allocator's at its state bytes")
    p.add_argument("--map", help="with --allocate: a map JSON from `sensitivity --json` (default: shipped or computed)")
    add_map_args(p, prefix="map-")
    add_executor_args(p)  # where --allocate's map points and plan measurements run


def parse_budget(text: str | None) -> dict:
    if not text:
        raise AnalysisError("--allocate needs --budget (a mean ratio like 0.5, bytes:N or tiles:N) or your plan as "
                            "--ratios.")
    kind, _, value = text.partition(":") if ":" in text else ("mean", "", text)
    try:
        number = float(value)
    except ValueError:
        number = None
    if kind not in ("mean", "bytes", "tiles") or number is None or number < 0:
        raise AnalysisError(f"--budget {show(text, 60)!r} is not a mean ratio (0.5), bytes:N or tiles:N; write it that way.")
    if kind == "mean":
        return {"mean_ratio": number}
    if number != int(number):
        raise AnalysisError(f"--budget {show(text, 60)!r} must be a whole number of {kind}.")
    return {"state_bytes": int(number)} if kind == "bytes" else {"tiles": int(number)}


def map_command(model, strategy: str) -> str:
    """The `sensitivity` command that measures a map of `model` (named so that it runs from any directory)."""
    import shlex

    from analysis.defaults import SENSITIVITY_RATIOS
    from analysis.models.load import command_name
    return (f"`python -m analysis sensitivity {command_name(model)} --strategy {shlex.quote(strategy)} --ratios "
            f"{','.join(map(str, SENSITIVITY_RATIOS))} --json map.json`")


def read_map(path: str, strategy: str | None, model, verb: str) -> dict:
    """A sensitivity map JSON from `path`, checked: a map, of `strategy` (any when None), of this model's weights,
    its numbers sound (analysis.shrink.map_check)."""
    from analysis.shrink.map_check import check_map
    from analysis.shrink.sensitivity import same_weights
    command = map_command(model, strategy or "l1")
    hint = f"write one with {command}"
    try:  # a regular file of sane size (a FIFO would hang, /dev/zero never ends), any nesting refused
        raw = reads.read_bytes(Path(path).expanduser(), MAX_MAP_BYTES, "--map", hint)
        smap = reads.loads(raw.decode("utf-8"), f"--map {path}", hint)
    except (OSError, ValueError) as exc:  # also JSONDecodeError and UnicodeDecodeError
        raise AnalysisError(f"--map {path} cannot be read as a sensitivity map JSON ({exc}).") from None
    if not isinstance(smap, dict) or smap.get("kind") != "sensitivity-map":
        raise AnalysisError(f"--map {path} is not a sensitivity map; {hint}.")
    # NaN, inf or absurd losses: one sentence here, not a fit's traceback
    check_map(smap, f"--map {path}", f"measure the map again with {map_command(model, str(smap.get('strategy')))}")
    if strategy is not None and smap.get("strategy") != strategy:
        raise AnalysisError(f"The map was measured with {smap.get('strategy')!r}, not {show(strategy, 60)!r}; "
                            f"{verb} with the map's strategy or measure a map for this one.")
    if not same_weights(smap, model):
        raise AnalysisError(f"The map was measured on other weights than this model's; measure a map for it with "
                            f"{map_command(model, strategy or str(smap.get('strategy')))}.")
    return smap


def allocation_for(args, model, tokenizer):
    """(report, map, choice) for `prune --allocate sensitivity`: from --map, the shipped map, or a computed one.

    The report is `analysis.shrink.allocate.allocate_and_choose`'s (the workflow "Verify and choose" runs too): the
    knapsack plan, the uniform plan and the rank-suggested plan at the same budget measured on the map's own
    split (validation); the best measured one is what gets pruned (`choice["ratios"]`).
    """
    from analysis.shrink.allocate import allocate_and_choose
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.sensitivity import compute_map, load_shipped, recall_task
    plan = None
    if args.ratio is not None or args.ratios:  # "your plan": measured beside the others, at its state bytes
        if args.budget:
            raise AnalysisError("With --allocate, give either --budget (the allocator's target) or --ratio/--ratios "
                                "(your plan, compared at its own state bytes), not both.")
        ratios = args.ratios or [args.ratio] * len(plan_key_dims(model, ratio=0.0))
        plan = {"ratios": ratios, "dims": plan_key_dims(model, ratios=ratios, round_to=args.round_to)}
        budget = None
    else:
        budget = parse_budget(args.budget)
    executor = executor_of(args)
    if args.map:
        smap = read_map(args.map, args.strategy, model, "prune")
    else:
        s, task = map_settings(args, model, args.strategy, comma_numbers(args.map_ratios, "--map-ratios"), "map_")
        smap = load_shipped(model, model.analysis_name, s) or compute_map(model, tokenizer, s, task,
                                                                          yes=args.yes, say=announce,
                                                                          executor=executor)
    report = allocate_and_choose(model, tokenizer, smap, budget, args.round_to, recall_task(model), plan=plan,
                                 executor=executor)
    return report, smap, report["choice"]


def allocation_report(args, model, tokenizer, report: dict, smap: dict, choice: dict) -> dict:
    """Print the knapsack plan and every candidate, predicted vs measured on the choice tokens, the winner, and the
    chosen plan and uniform on held-out tokens;
    return the report (`allocate_and_choose`'s) for the JSON."""
    if args.json != "-":
        print(f"allocated from the {report['strategy']} sensitivity map ({report['target']}, {report['cost']:,} of "
              f"{report['budget']:,} {report['unit']}); candidates measured on {choice['measure']}:", flush=True)
        for c in choice["candidates"]:
            pred = ("–" if c["predicted_loss"] is None
                    else f"{c['predicted_loss']:+.4f} ± {c['predicted_uncertainty']:.4f}")
            print(f"  {c['name']:<22} ratios {[round(r, 4) for r in c['ratios']]} dk' {c['dims']} cost {c['cost']:,}: "
                  f"predicted loss {pred}, measured {c['measured_loss']:+.4f}", flush=True)
        print(f"chosen: {choice['winner']} ({choice['reason']})", flush=True)
        if choice.get("yours"):
            print(choice["yours"], flush=True)
        held = choice.get("held_out")
        if held:  # the answer: measured on held-out tokens, never used to choose
            print(f"{held['sentence']} ({held['measure']}); recommended: {held['recommended']}", flush=True)
    return report


COMMANDS = {
    "sensitivity": ("layer-sensitivity map: each layer pruned alone at each ratio, Δ perplexity or Δ recall",
                    _setup_sensitivity, run_sensitivity),
}
