"""Fewer heads or smaller keys? Plans that keep the same fraction of the recurrent state, measured side by side.

For each state budget (a fraction of the state kept, analysis.shrink.budget_plans) the sweep prunes the model
three ways, "dk" (every channel strategy), "heads" (every head strategy) and "mixed" (every pair), and scores
each plan on the same test windows as the unpruned model: perplexity, and Δ log perplexity against the unpruned
model with its paired standard error over the windows (the same tokens scored by both). Every point says the
state bytes it really keeps, so plans sit on one state-bytes axis. Points go through the one point cache
(analysis.io.point_cache): a rerun with the same weights, settings and code is instant.
"""
from __future__ import annotations

from dataclasses import replace

from analysis.io import point_cache
from analysis.io.point_identity import model_identity
from analysis.io.points import IN_PROCESS, Executor, Point, run_points
from analysis.shrink.budget_plans import KINDS, budget_plan
from analysis.shrink.calibration import CalibrationSettings
from analysis.shrink.heads.prune import HeadPlan
from analysis.shrink.heads.strategies import get_head_strategy
from analysis.shrink.prune import check_rescale
from analysis.evaluate.measure import Evaluation
from analysis.shrink.prune_workflow import prune_then_measure
from analysis.evaluate.perplexity import paired_difference
from analysis.shrink.strategies import get_strategy

AXES = {"dk": ("dk",), "heads": ("heads",), "both": KINDS}   # `sweep --axis`: which kinds of plan
FIELDS = {"kind": point_cache.TEXT, "strategy": point_cache.TEXT, "head_strategy": point_cache.TEXT,
          "budget": point_cache.NUMBER, "head_k_dims": point_cache.INT_LIST, "value_heads": point_cache.INT_LIST,
          "state_bytes_per_sequence": point_cache.INT, "state_fraction": point_cache.NUMBER,
          "perplexity": point_cache.NUMBER, "tokens": point_cache.INT, "context": point_cache.INT,
          "dataset": point_cache.TEXT}
PAIRED = {"delta_log_ppl": point_cache.NUMBER, "se": point_cache.NUMBER, "windows": point_cache.INT}


def plans(axis: str, strategies: list[str], head_strategies: list[str], budgets: list[float]) -> list[tuple]:
    """(kind, channel strategy or "-", head strategy or "-", budget) of every point, in order."""
    out = []
    for budget in budgets:
        for kind in AXES[axis]:
            if kind == "dk":
                out += [(kind, s, "-", budget) for s in strategies]
            elif kind == "heads":
                out += [(kind, "-", h, budget) for h in head_strategies]
            else:
                out += [(kind, s, h, budget) for s in strategies for h in head_strategies]
    return out


def check_plans(model, axis: str, strategies: list[str], head_strategies: list[str], budgets: list[float]) -> None:
    """Every bad name or budget as one sentence, before any work."""
    from analysis.errors import AnalysisError
    if axis not in AXES:
        raise AnalysisError(f"Unknown axis {axis!r}; choose dk, heads or both.")
    for name in strategies if axis != "heads" else []:
        get_strategy(name)
    for name in head_strategies if axis != "dk" else []:
        get_head_strategy(name)
    for kind in AXES[axis]:
        for budget in budgets:
            budget_plan(model, kind, budget)


def budget_sweep(model, tokenizer, axis: str, strategies: list[str], head_strategies: list[str],
                 budgets: list[float], evaluation: Evaluation = Evaluation(max_tokens=8192),
                 calib: CalibrationSettings = CalibrationSettings(), rescale: str = "original", *,
                 use_cache: bool = True, cancel=None, executor: Executor = IN_PROCESS):
    """Yield the unpruned baseline, then one result per plan (plans() order in-process; on Ray (analysis.io.points)
    the cached ones first, then each as its task finishes). Over eight parameters: axis to budgets are the grid
    (`plans`), evaluation and calib (its seed also seeds the random strategies) what is measured, keywords how."""
    check_rescale(rescale)
    check_plans(model, axis, strategies, head_strategies, budgets)
    executor.connect()  # an unreachable cluster is one sentence before anything is written
    point_cache.check_writable()
    device = str(next(model.parameters()).device)
    settings = {"model": model_identity(model), "study": "equal state budget", "split": evaluation.split,
                "context": evaluation.context, "eval_tokens": evaluation.max_tokens, "calib_sequences": calib.sequences,
                "calib_tokens": calib.tokens, "seed": calib.seed, "device": device, "rescale": rescale}
    evaluation = replace(evaluation, latency=False, per_window=True)
    run = dict(executor=executor, device=device, use_cache=use_cache, cancel=cancel)
    unpruned = Point({**settings, "point": "unpruned"}, FIELDS)
    baseline = next(run_points(_baseline_point, [unpruned], lambda _: (model, tokenizer, evaluation), **run))[1]
    yield baseline
    points = [Point({**settings, "kind": kind, "strategy": strategy, "head_strategy": head_strategy, "budget": budget},
                    {**FIELDS, **PAIRED}, {"kind": kind, "strategy": strategy, "head_strategy": head_strategy},
                    (kind, strategy, head_strategy, budget))
              for kind, strategy, head_strategy, budget in plans(axis, strategies, head_strategies, budgets)]

    def shared(todo):
        calibrated = calib.calibrate(model, tokenizer, cancel) \
            if any(_needs_calibration(*p.args[1:3]) for p in todo) else None
        return model, tokenizer, calibrated, baseline, evaluation, calib.seed, rescale
    for _, point in run_points(_plan_point, points, shared, **run):
        yield point


def _needs_calibration(strategy: str, head_strategy: str) -> bool:
    return (strategy != "-" and get_strategy(strategy).needs_calibration) or \
        (head_strategy != "-" and get_head_strategy(head_strategy).needs_calibration)


def _baseline_point(model, tokenizer, evaluation, cancel=None) -> dict:
    return _result(evaluation.measure(model, tokenizer, cancel=cancel), "unpruned", "-", "-", 1.0, None)


def _plan_point(model, tokenizer, calib, baseline, evaluation, seed, rescale, kind, strategy, head_strategy, budget,
                cancel=None) -> dict:
    """One plan at one budget, pruned and scored on the baseline's windows (here or on a Ray worker)."""
    plan = budget_plan(model, kind, budget)
    heads = None if kind == "dk" else HeadPlan(head_strategy, tuple(plan["head_counts"]))
    run = prune_then_measure(model, tokenizer, None if strategy == "-" else strategy, plan["dims"],
                             calib if _needs_calibration(strategy, head_strategy) else None, evaluation, seed=seed,
                             rescale=rescale, heads=heads, cancel=cancel)
    return _result(run.measured, kind, strategy, head_strategy, budget, baseline)


def _result(got: dict, kind: str, strategy: str, head_strategy: str, budget: float, baseline: dict | None) -> dict:
    ppl = got["perplexity"]
    out = {"kind": kind, "strategy": strategy, "head_strategy": head_strategy, "budget": budget,
           "head_k_dims": got["head_k_dims"], "value_heads": got["value_heads_per_layer"],
           "state_bytes_per_sequence": got["state_bytes_per_sequence"], "perplexity": ppl["perplexity"],
           "tokens": ppl["tokens"], "context": ppl["context"], "stride": ppl["stride"], "dataset": ppl["dataset"],
           "window_losses": ppl["window_losses"], "device": got["device"], "dtype": got["dtype"]}
    if baseline is None:
        out["state_fraction"] = 1.0
    else:
        out["state_fraction"] = got["state_bytes_per_sequence"] / baseline["state_bytes_per_sequence"]
        out.update(paired_difference(baseline["window_losses"], ppl["window_losses"]))
    return out
