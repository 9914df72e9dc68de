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

from analysis.io import point_cache, ray_executor
from analysis.io.points import Executor, Point, run_points
from analysis.io.point_identity import model_identity
from analysis.archs import adapter_for
from analysis.shrink.calibration import calibrate
from analysis.runtime.cancel import check
from analysis.evaluate.latency import kernel_latency
from analysis.models.load import describe
from analysis.shrink.prune import check_rescale, readout_label
from analysis.shrink.prune_workflow import Evaluation, prune_then_measure
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


def sweep(model, tokenizer, strategies: list[str], ratios: list[float], split: str = "test", context: int = 256,
          eval_tokens: int = 8192, recover_steps: int = 0, calib_sequences: int = 16, calib_tokens: int = 256,
          seed: int = 0, latency: bool = True, use_cache: bool = True, rescale: str = "original", calibration=None,
          executor: str = "in-process", address: str | None = None, num_cpus: int | None = None, cancel=None,
          yes: bool = False, say=None, tasks=None):
    """Yield the unpruned baseline first, then one result per (strategy, ratio).

    calibration: optional zero-argument callable returning the Calibration of `calib_sequences` × `calib_tokens`
    train tokens (seed `seed`), for a caller that already holds one (the dashboard shares a single one between
    its pages); by default it is computed here, once, when the first strategy needs it.
    executor "ray": the points run as Ray tasks on the cluster at `address` (default: a local Ray with
    `num_cpus` cores, all of them by default) and arrive in the order they finish, cached ones first.
    cancel (analysis.runtime.cancel): checked inside every point (windows, batches, recovery steps); a cancelled
    point raises Cancelled before its cache entry is written (on Ray: closing the generator cancels the tasks).
    yes / say: the whole sweep's estimated time is refused past an hour unless `yes`; `say` gets its line.
    tasks: analysis.evaluate.harness.TaskSettings: each point also gets those tasks' accuracy; the tasks are loaded
    (names and data checked) before the first point, and their data hash is part of every point's key.
    """
    for name in strategies:
        get_strategy(name)  # validate up front, before any work
    check_rescale(rescale)
    ray_executor.check_executor(executor)
    plan = _task_plan(model, tokenizer, tasks)
    _check_size(model, len(strategies) * len(ratios), context, eval_tokens, recover_steps, calib_sequences,
                calib_tokens, calibration is None and any(get_strategy(n).needs_calibration for n in strategies),
                yes, say, plan.workload(tokenizer) if plan is not None else None)
    where = Executor(executor, address, num_cpus)
    where.connect()  # before anything is written
    point_cache.check_writable()
    device = str(next(model.parameters()).device)
    settings = {"model": model_identity(model), "split": split, "context": context, "eval_tokens": eval_tokens,
                "recover_steps": recover_steps, "calib_sequences": calib_sequences, "calib_tokens": calib_tokens,
                "seed": seed, "device": device,
                "latency": TIMING if latency else False, "tasks": plan.key() if plan is not None else None}
    base_key = {**settings, "point": "unpruned"}
    opts = {"split": split, "context": context, "eval_tokens": eval_tokens, "latency": latency,
            "recover_steps": recover_steps, "seed": seed, "rescale": rescale, "confirmed": True, "tasks": tasks}
    if not where.on_ray:
        opts["task_plan"] = plan  # loaded once here; a Ray worker loads its own from opts["tasks"]
    run = dict(executor=where, device=device, use_cache=use_cache, cancel=cancel)
    baseline = next(run_points(_baseline_point, [Point(base_key, *_checks(base_key))],
                               lambda _: (model, tokenizer, opts), **run))[1]
    yield baseline
    points = []
    for name in strategies:
        for ratio in ratios:
            key = {**settings, "strategy": name, "ratio": ratio, "rescale": rescale}
            points.append(Point(key, *_checks(key), args=(name, ratio)))

    def shared(todo):
        needs = any(get_strategy(p.args[0]).needs_calibration for p in todo)
        calib = (calibration() if calibration is not None else calibrate(
            model, tokenizer, n_sequences=calib_sequences, seq_len=calib_tokens, seed=seed, cancel=cancel)) \
            if needs else None
        return model, tokenizer, calib, baseline, opts
    for _, point in run_points(_sweep_point, points, shared, **run):
        yield point


def _task_plan(model, tokenizer, tasks):
    """The tasks loaded once for every point (None without tasks); a model the harness cannot read is refused here."""
    if tasks is None:
        return None
    from analysis.evaluate.harness import prepare, tokenizer_for
    plan = prepare(tasks)
    tokenizer_for(model, tokenizer, plan)
    return plan


def _check_size(model, points: int, context: int, eval_tokens: int, recover_steps: int, calib_sequences: int,
                calib_tokens: int, calibrates: bool, yes: bool, say, task_work=None) -> None:
    """Memory of the calibration and recovery, and the time of every point, before the first point runs."""
    from analysis.models import limits, workload
    from analysis.shrink.calibration import check_size
    if calibrates:
        check_size(model, calib_sequences, calib_tokens)
    if recover_steps:
        limits.check_recovery(model, 8, 256)  # recover()'s defaults, as _point calls it
    evals = -(-workload.windows(eval_tokens + 1, context, context) // 8)
    parts = [(evals * (2 if recover_steps else 1), 8, context, 1.0), (recover_steps, 8, 256, workload.TRAIN_STEP)]
    if task_work is not None:  # (forwards, batch, tokens) of one evaluation of the tasks
        limits.check_forward(model, task_work[1], task_work[2], "The tasks' longest batch")
        parts.append((*task_work, 1.0))
    workload.check_points("The sweep", points + 1, model, parts, "use fewer strategies, ratios, tokens to score "
                          "or recovery steps", yes, say)


def _evaluation(opts: dict) -> Evaluation:
    """A point's measurement: perplexity of the split's first tokens (and the tasks); the sweep times the kernel
    itself, at the layer-0 key dim (`_result`). A task evaluation's time is in the sweep's estimate, confirmed there.
    Tasks: a TaskPlan loaded once (in-process) or the TaskSettings (a Ray worker loads them itself)."""
    return Evaluation(opts["split"], opts["context"], opts["eval_tokens"], latency=False,
                      tasks=opts.get("task_plan") or opts.get("tasks"), confirmed=True)


def _point(model, tokenizer, calib, baseline: dict, opts: dict, name: str, ratio: float) -> dict:
    """One (strategy, ratio) point: prune, score (and recover): the same function in-process and on Ray."""
    strategy = get_strategy(name)
    seed, rescale, cancel = opts["seed"], opts["rescale"], opts.get("cancel")
    dims = plan_key_dims(model, ratio=ratio)
    evaluation = _evaluation(opts)
    run = prune_then_measure(model, tokenizer, name, dims, calib if strategy.needs_calibration else None, evaluation,
                             seed=seed, rescale=rescale, cancel=cancel)
    pruned = run.pruned.model
    result = _result(pruned, run.measured, name, ratio, opts, baseline, cancel)
    result["rescale"], result["readout"] = rescale, readout_label(model, rescale)
    result["calibration"] = calib.label if strategy.needs_calibration else "none (data-free)"
    if opts["recover_steps"]:
        recovered = recover(pruned, tokenizer, RecoverySettings(method="qk", steps=opts["recover_steps"], seed=seed),
                            cancel=cancel, yes=opts.get("confirmed", False)).model  # estimated up front
        after = replace(evaluation, tasks=None).measure(recovered, tokenizer, cancel=cancel)["perplexity"]
        result["recovered_perplexity"] = after["perplexity"]
        result["recovered_delta_vs_unpruned"] = after["perplexity"] / baseline["perplexity"] - 1
    return result


def _baseline_point(model, tokenizer, opts: dict, cancel=None) -> dict:
    return _evaluate(model, tokenizer, "unpruned", 0.0, opts, None, cancel)


def _sweep_point(model, tokenizer, calib, baseline: dict, opts: dict, name: str, ratio: float, cancel=None) -> dict:
    return _point(model, tokenizer, calib, baseline, {**opts, "cancel": cancel}, name, ratio)


def _evaluate(model, tokenizer, strategy, ratio, opts: dict, baseline, cancel=None) -> dict:
    """The unpruned model's point (a pruned one is measured by prune_then_measure, then summed up by `_result`)."""
    return _result(model, _evaluation(opts).measure(model, tokenizer, cancel=cancel), strategy, ratio, opts, baseline,
                   cancel)


def _result(model, got: dict, strategy, ratio, opts: dict, baseline, cancel=None) -> dict:
    """A point from its measure() dict: perplexity and its labels, Δ vs the unpruned model, and (with latency) the
    kernel timed at the layer-0 key dim."""
    ppl = got["perplexity"]
    result = {"strategy": strategy, "ratio": ratio, "head_k_dims": got["head_k_dims"], "tiles": got["tiles"],
              "perplexity": ppl["perplexity"], "bits_per_byte": ppl["bits_per_byte"], "dataset": ppl["dataset"],
              "split": opts["split"], "context": opts["context"], "stride": ppl["stride"], "tokens": ppl["tokens"],
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
