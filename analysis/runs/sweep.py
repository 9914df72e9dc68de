"""Strategies × ratios (× optional recovery) as a generator of results, cached on disk.

Each result: strategy, ratio, key dims, tiles, perplexity (dataset/split/context/stride/tokens), Δ vs
the unpruned model, parameters, state bytes per sequence, kernel latency at the layer-0 key dim, and with
`tasks` the lm-evaluation-harness accuracy of each task (analysis.evaluate.harness; keyed by the tasks' data). A
rerun with the same model weights, settings and code is served from the cache (`analysis.io.point_cache`)
instantly; an entry that does not prove itself is recomputed.

Executors (analysis.io.points, the one point executor of every multi-point workload): "in-process" (default)
computes the points one after another here; "ray" runs one Ray task per point and yields the results as they
finish. Both write the same cache entries under the same keys, so either resumes what the other started.
"""
from __future__ import annotations

from dataclasses import replace

from analysis.io import point_cache
from analysis.io.points import IN_PROCESS, Executor, Point, run_points
from analysis.io.point_identity import model_identity
from analysis.archs import adapter_for
from analysis.shrink.calibration import CalibrationSettings
from analysis.runtime.cancel import check
from analysis.evaluate.latency import kernel_latency
from analysis.models.load import describe
from analysis.shrink.prune import check_rescale, readout_label
from analysis.evaluate.measure import Evaluation
from analysis.shrink.prune_workflow import prune_then_measure
from analysis.models.key_plan import plan_key_dims
from analysis.shrink.recovery import RecoverySettings, recover
from analysis.shrink.strategies import get_strategy

TIMING = "repeats-iqr-1thread"  # in the cache key: points timed the older way (one median, all threads) are redone
# what a cached result must hold, typed, to be served (analysis.io.point_cache checks it)
BASE_FIELDS = {"strategy": point_cache.TEXT, "ratio": point_cache.NUMBER, "perplexity": point_cache.NUMBER,
               "bits_per_byte": point_cache.NUMBER, "head_k_dims": point_cache.INT_LIST,
               "tiles": point_cache.INT_LIST, "parameters": point_cache.INT, "state_bytes_per_sequence": point_cache.INT,
               "context": point_cache.INT, "stride": point_cache.INT, "tokens": point_cache.INT,
               "dataset": point_cache.TEXT, "split": point_cache.TEXT}
LATENCY_FIELDS = {"kernel_ms": point_cache.NUMBER, "kernel": point_cache.DICT, "kernel_timer": point_cache.TEXT}
POINT_FIELDS = {"delta_vs_unpruned": point_cache.NUMBER, "rescale": point_cache.TEXT,
                "calibration": point_cache.TEXT}
RECOVERY_FIELDS = {"recovered_perplexity": point_cache.NUMBER, "recovered_delta_vs_unpruned": point_cache.NUMBER}
TASK_FIELDS = {"tasks": point_cache.DICT, "harness": point_cache.TEXT}


def _checks(key: dict) -> tuple[dict, dict]:
    """(schema, expected values) a cached result for `key` must satisfy: right fields, right types, this point."""
    schema = {**BASE_FIELDS, **(LATENCY_FIELDS if key["latency"] else {}), **(TASK_FIELDS if key.get("tasks") else {})}
    expect = {"split": key["split"], "context": key["context"]}
    if key.get("point") == "unpruned":
        return schema, {**expect, "strategy": "unpruned", "ratio": 0.0}
    schema = {**schema, **POINT_FIELDS, **(RECOVERY_FIELDS if key["recover_steps"] else {})}
    return schema, {**expect, "strategy": key["strategy"], "ratio": key["ratio"], "rescale": key["rescale"]}


def sweep(model, tokenizer, strategies: list[str], ratios: list[float], evaluation=Evaluation(max_tokens=8192),
          calib: CalibrationSettings = CalibrationSettings(), recover_steps: int = 0, rescale: str = "original", *,
          calibration=None, executor: Executor = IN_PROCESS, use_cache: bool = True, cancel=None, say=None):
    """Yield the unpruned baseline first, then one result per (strategy, ratio).

    evaluation: every point's split, context, tokens and tasks (TaskSettings: loaded and checked before the first
    point, their data hash in every key); `latency` times the kernel at the layer-0 key dim; the whole sweep's
    estimated time is refused past an hour unless `confirmed` (`say` gets its line). calib's seed also seeds the
    random strategy and recovery. The keywords (hence over eight parameters) are how points run, not what they
    measure: calibration, a zero-argument callable returning the Calibration of `calib` for a caller that holds
    one (the dashboard's pages share one); executor "ray" (analysis.io.points): the points arrive as they finish,
    cached ones first; cancel (analysis.runtime.cancel): checked inside every point, and a cancelled point raises
    Cancelled before its cache entry is written (on Ray: closing the generator cancels the tasks).
    """
    for name in strategies:
        get_strategy(name)  # validate up front, before any work
    check_rescale(rescale)
    plan = _task_plan(model, tokenizer, evaluation.tasks)
    _check_size(model, len(strategies) * len(ratios), evaluation, recover_steps, calib,
                calibration is None and any(get_strategy(n).needs_calibration for n in strategies), say,
                plan.workload(tokenizer) if plan is not None else None)
    executor.connect()  # before anything is written
    point_cache.check_writable()
    device = str(next(model.parameters()).device)
    e = evaluation
    settings = {"model": model_identity(model), "split": e.split, "context": e.context, "eval_tokens": e.max_tokens,
                "recover_steps": recover_steps, "calib_sequences": calib.sequences, "calib_tokens": calib.tokens,
                "seed": calib.seed, "device": device,
                "latency": TIMING if e.latency else False, "tasks": plan.key() if plan is not None else None}
    base_key = {**settings, "point": "unpruned"}
    # each point's measurement (its time confirmed above; `_result` times the kernel); a Ray worker loads its tasks
    measured = replace(e, latency=False, confirmed=True, tasks=e.tasks if executor.on_ray else plan)
    opts = {"evaluation": measured, "latency": e.latency, "recover_steps": recover_steps, "seed": calib.seed,
            "rescale": rescale}
    run = dict(executor=executor, device=device, use_cache=use_cache, cancel=cancel)
    baseline = next(run_points(_evaluate, [Point(base_key, *_checks(base_key))],
                               lambda _: (model, tokenizer, opts), **run))[1]
    yield baseline
    points = []
    for name in strategies:
        for ratio in ratios:
            key = {**settings, "strategy": name, "ratio": ratio, "rescale": rescale}
            points.append(Point(key, *_checks(key), args=(name, ratio)))

    def shared(todo):
        needs = any(get_strategy(p.args[0]).needs_calibration for p in todo)
        calibrated = (calibration() if calibration is not None else calib.calibrate(model, tokenizer, cancel)) \
            if needs else None
        return model, tokenizer, calibrated, baseline, opts
    for _, point in run_points(_point, points, shared, **run):
        yield point


def _task_plan(model, tokenizer, tasks):
    """The tasks loaded once for every point (None without tasks); a model the harness cannot read is refused here."""
    if tasks is None:
        return None
    from analysis.evaluate.harness import prepare, tokenizer_for
    plan = prepare(tasks)
    tokenizer_for(model, tokenizer, plan)
    return plan


def _check_size(model, points: int, e: Evaluation, recover_steps: int, calib: CalibrationSettings,
                calibrates: bool, say, task_work=None) -> None:
    """Memory of the calibration and recovery, and the time of every point, before the first point runs."""
    from analysis.models import limits, workload
    if calibrates:
        calib.check_size(model)
    if recover_steps:
        limits.check_recovery(model, 8, 256)  # recover()'s defaults, as _point calls it
    evals = -(-workload.windows(e.max_tokens + 1, e.context, e.context) // 8)
    parts = [(evals * (2 if recover_steps else 1), 8, e.context, 1.0), (recover_steps, 8, 256, workload.TRAIN_STEP)]
    if task_work is not None:  # (forwards, batch, tokens) of one evaluation of the tasks
        limits.check_forward(model, task_work[1], task_work[2], "The tasks' longest batch")
        parts.append((*task_work, 1.0))
    workload.check_points("The sweep", points + 1, model, parts, "use fewer strategies, ratios, tokens to score "
                          "or recovery steps", e.confirmed, say)


def _point(model, tokenizer, calib, baseline: dict, opts: dict, name: str, ratio: float, cancel=None) -> dict:
    """One (strategy, ratio) point: prune, score (and recover): the same function in-process and on Ray."""
    strategy = get_strategy(name)
    seed, rescale = opts["seed"], opts["rescale"]
    dims = plan_key_dims(model, ratio=ratio)
    evaluation = opts["evaluation"]
    run = prune_then_measure(model, tokenizer, name, dims, calib if strategy.needs_calibration else None, evaluation,
                             seed=seed, rescale=rescale, cancel=cancel)
    pruned = run.pruned.model
    result = _result(pruned, run.measured, name, ratio, opts, baseline, cancel)
    result["rescale"], result["readout"] = rescale, readout_label(model, rescale)
    result["calibration"] = calib.label if strategy.needs_calibration else "none (data-free)"
    if opts["recover_steps"]:
        recovered = recover(pruned, tokenizer, RecoverySettings(method="qk", steps=opts["recover_steps"], seed=seed),
                            cancel=cancel, yes=True).model  # estimated up front
        after = replace(evaluation, tasks=None).measure(recovered, tokenizer, cancel=cancel)["perplexity"]
        result["recovered_perplexity"] = after["perplexity"]
        result["recovered_delta_vs_unpruned"] = after["perplexity"] / baseline["perplexity"] - 1
    return result


def _evaluate(model, tokenizer, opts: dict, cancel=None) -> dict:
    """The unpruned model's point (a pruned one is measured by prune_then_measure, then summed up by `_result`)."""
    return _result(model, opts["evaluation"].measure(model, tokenizer, cancel=cancel), "unpruned", 0.0, opts, None,
                   cancel)


def _result(model, got: dict, strategy, ratio, opts: dict, baseline, cancel=None) -> dict:
    """A point from its measure() dict: perplexity and its labels, Δ vs the unpruned model, and (with latency) the
    kernel timed at the layer-0 key dim."""
    ppl, e = got["perplexity"], opts["evaluation"]
    result = {"strategy": strategy, "ratio": ratio, "head_k_dims": got["head_k_dims"], "tiles": got["tiles"],
              "perplexity": ppl["perplexity"], "bits_per_byte": ppl["bits_per_byte"], "dataset": ppl["dataset"],
              "split": e.split, "context": e.context, "stride": ppl["stride"], "tokens": ppl["tokens"],
              "parameters": got["parameters"], "state_bytes_per_sequence": got["state_bytes_per_sequence"],
              "device": got["device"], "dtype": got["dtype"]}
    if baseline is not None:
        result["delta_vs_unpruned"] = ppl["perplexity"] / baseline["perplexity"] - 1
    if "tasks" in got:
        result["harness"], result["tasks"] = got["harness"], got["tasks"]
    if opts["latency"]:
        check(cancel)
        info = describe(model)
        point = next(kernel_latency([info.head_k_dims[0]], batch=2, tokens=512, heads=info.value_heads,
                                    value_dim=info.head_v_dim, device=info.device,
                                    kernel=adapter_for(model).kernel, min_run_time=0.2))
        result["kernel_ms"] = point["ms"]
        result["kernel"] = {k: point[k] for k in ("median_ms", "spread", "repeats", "threads", "noisy", "timer")}
        result["kernel_timer"] = f"{point['op']}, B{point['batch']} T{point['tokens']} H{point['heads']} " \
                                 f"dv{point['value_dim']}, {point['dtype']} on {point['device_name']}"
    return result
