"""`eval` over several plans: the unpruned model and each key-dim plan (pruned with one strategy) scored on the same
lm-evaluation-harness tasks, one point each on the point executor (analysis.io.points): in-process or one Ray
task per plan, through the one point cache (keyed by the model's weights, the tasks' settings and data, the
strategy, the plan and the calibration), so a plan scored on Ray is served in-process and back, and a run killed
between plans resumes from the plans it stored.

A plan file is JSON: a list of plans, each a list of per-layer key dims or an object with "head_k_dims" (or
per-layer "ratios") and an optional "name"; a single such object (what `plan --recommend --json` writes) is one
plan; {"plans": [...]} also works.
"""
from __future__ import annotations

from pathlib import Path

from analysis.errors import AnalysisError
from analysis.io import point_cache, reads
from analysis.io.point_identity import model_identity
from analysis.io.points import IN_PROCESS, Executor, Point, run_points
from analysis.io.writes import show
from analysis.models.key_plan import key_dims, plan_key_dims
from analysis.shrink.calibration import CalibrationSettings

MAX_PLANS_BYTES = 4 << 20
MAX_PLANS = 256
FIELDS = {"name": point_cache.TEXT, "head_k_dims": point_cache.INT_LIST, "tasks": point_cache.DICT,
          "harness": point_cache.TEXT}
HINT = ('write a JSON list of plans, each a list of per-layer key dims or {"name": ..., "head_k_dims": [...]}, '
        "e.g. from `plan --recommend --json`")


def read_plans(path: str, model) -> list[dict]:
    """[{"name", "head_k_dims"}] from the plan file at `path`, each checked against the model (one sentence)."""
    try:
        raw = reads.read_bytes(Path(path).expanduser(), MAX_PLANS_BYTES, "--plans", HINT)
        data = reads.loads(raw.decode("utf-8"), f"--plans {path}", HINT)
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"--plans {show(path)} cannot be read as a plan JSON ({exc}); {HINT}.") from None
    if isinstance(data, dict):
        data = data["plans"] if isinstance(data.get("plans"), list) else [data]
    if not isinstance(data, list) or not data:
        raise AnalysisError(f"--plans {show(path)} holds no plans; {HINT}.")
    if len(data) > MAX_PLANS:
        raise AnalysisError(f"--plans {show(path)} holds {len(data)} plans, more than {MAX_PLANS}; split it.")
    return [_plan(entry, i, model, path) for i, entry in enumerate(data)]


def _plan(entry, i: int, model, path: str) -> dict:
    full = key_dims(model)
    name = f"plan {i + 1}"
    if isinstance(entry, dict):
        name = str(entry.get("name") or name)[:80]
        if isinstance(entry.get("head_k_dims"), list):
            entry = entry["head_k_dims"]
        elif isinstance(entry.get("ratios"), list):
            entry = plan_key_dims(model, ratios=entry["ratios"])
    if not (isinstance(entry, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in entry)):
        raise AnalysisError(f"Plan {i + 1} of --plans {show(path)} is not a list of key dims; {HINT}.")
    if len(entry) != len(full) or not all(1 <= d <= dk for d, dk in zip(entry, full)):
        raise AnalysisError(f"Plan {i + 1} of --plans {show(path)} keeps {entry} key dims; this model has "
                            f"{len(full)} layers of {full}: give one dim per layer, each from 1 to the layer's own.")
    return {"name": name, "head_k_dims": list(entry)}


def eval_plans(model, tokenizer, tasks, plans: list[dict], strategy: str = "l1", *,
               calib: CalibrationSettings = CalibrationSettings(), executor: Executor = IN_PROCESS,
               use_cache: bool = True, cancel=None, yes: bool = False, say=None):
    """Yield (index, result): 0 the unpruned model, i the plan plans[i - 1] (in-process in order; on Ray, cached
    ones first, then as their tasks finish). tasks: analysis.evaluate.harness.TaskSettings; each result is the
    harness's report (evaluate_tasks) plus "name", "head_k_dims", "strategy" and "cached"."""
    from analysis.evaluate.harness import prepare, tokenizer_for
    from analysis.shrink.strategies import get_strategy
    strat = get_strategy(strategy)
    plan = prepare(tasks, say=say)  # names and data checked before any point
    tokenizer_for(model, tokenizer, plan)  # a model the harness cannot read: one sentence here
    _check_size(model, tokenizer, plan, len(plans) + 1, calib if strat.needs_calibration else None, yes, say)
    executor.connect()  # an unreachable cluster is one sentence before anything is written
    point_cache.check_writable()
    param = next(model.parameters())
    device = str(param.device)
    base = {"kind": "eval-plan", "model": model_identity(model), "device": device, "dtype": str(param.dtype),
            "tasks": plan.key()}
    calib_key = {"calib_sequences": calib.sequences, "calib_tokens": calib.tokens, "seed": calib.seed} \
        if strat.needs_calibration else {"seed": calib.seed}
    points = [Point({**base, "point": "unpruned"}, FIELDS, {"name": "unpruned"}, ("unpruned", None))]
    for p in plans:
        dims = p["head_k_dims"]
        key = {**base, "strategy": strategy, "head_k_dims": dims, **calib_key}
        points.append(Point(key, FIELDS, {"head_k_dims": dims}, (p["name"], dims)))
    opts = {"strategy": strategy, "seed": calib.seed, "yes": yes,
            # loaded once here; a Ray worker loads its own from the settings
            "tasks": tasks if executor.on_ray else plan}

    def shared(todo):
        drawn = None
        if strat.needs_calibration and any(p.args[1] is not None for p in todo):
            drawn = calib.calibrate(model, tokenizer, cancel=cancel)
        return model, tokenizer, drawn, opts
    yield from run_points(_plan_point, points, shared, executor=executor, device=device, use_cache=use_cache,
                          cancel=cancel)


def _check_size(model, tokenizer, plan, points: int, calib: CalibrationSettings | None, yes: bool, say) -> None:
    from analysis.models import limits, workload
    forwards, batch, tokens = plan.workload(tokenizer)
    limits.check_forward(model, batch, tokens, "The tasks' longest batch")
    if calib is not None:
        calib.check_size(model)
    workload.check_points("eval over plans", points, model, [(forwards, batch, tokens, 1.0)],
                          "use fewer plans, tasks or --limit", yes, say)


def _plan_point(model, tokenizer, calib, opts: dict, name: str, dims, cancel=None) -> dict:
    """One plan: prune `model` to `dims` (None: the unpruned model) and score the tasks; in-process or on Ray."""
    from analysis.evaluate.harness import evaluate_tasks
    target, strategy = model, None
    if dims is not None:
        from analysis.shrink.prune_workflow import pruned
        strategy = opts["strategy"]
        target = pruned(model, strategy, dims, calib, seed=opts["seed"]).model
    report = evaluate_tasks(target, tokenizer, opts["tasks"], cancel=cancel, yes=opts["yes"])
    return {"name": name, "head_k_dims": key_dims(target), "strategy": strategy, **report}
