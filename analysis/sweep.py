"""Strategies × ratios (× optional recovery) as a generator of results, cached on disk.

Each result: strategy, ratio, key dims, tiles, perplexity (dataset/split/context/stride/tokens), Δ vs
the unpruned model, parameters, state bytes per sequence, kernel latency at the layer-0 key dim. A
rerun with the same model weights and settings is served from the cache instantly.

Executors: "in-process" (default) computes the points one after another here; "ray" runs one Ray task
per point (analysis.ray_executor) and yields the results as they finish. Both write the same cache
entries under the same keys, so either resumes what the other started.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import torch

from analysis import ray_executor
from analysis.io import writes
from analysis.archs import adapter_for
from analysis.calibration import calibrate
from analysis.errors import AnalysisError
from analysis.evaluate import perplexity
from analysis.latency import kernel_latency
from analysis.models import REPO_ROOT, describe
from analysis.prune import check_rescale, plan_key_dims, prune, readout_label, tiles
from analysis.recovery import recover
from analysis.strategies import get_strategy

TIMING = "repeats-iqr-1thread"  # in the cache key: points timed the older way (one median, all threads) are redone
CACHE_DIR = Path(os.environ.get("STATE_RANK_CACHE", REPO_ROOT / ".cache" / "sweeps"))


def fingerprint(model) -> str:
    """Hash of the weights themselves (not the path): every byte of every tensor, its name, dtype and shape,
    plus the config (which holds settings such as the readout scale), so any change gets a new key."""
    h = hashlib.blake2b(digest_size=16)
    config = {k: v for k, v in model.config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def _cache_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return CACHE_DIR / f"{digest}.json"


def _write_atomic(path: Path, payload: dict) -> None:
    """One cache entry, through the project's one atomic writer (normal permissions)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AnalysisError(f"Cannot write the sweep cache in {path.parent} ({exc.strerror or exc}); set "
                            "STATE_RANK_CACHE to a writable directory.") from None
    writes.write_text(path, json.dumps(payload), label="the sweep cache")


def _check_cache_dir() -> None:
    """Fail in one sentence before any work when the cache directory cannot be written (a private,
    uniquely named probe file, removed on close: nothing else in the folder is touched)."""
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=CACHE_DIR, prefix=".probe-"):
            pass
    except OSError as exc:
        raise AnalysisError(f"Cannot write the sweep cache in {CACHE_DIR} ({exc.strerror or exc}); set "
                            "STATE_RANK_CACHE to a writable directory.") from None


def _read_cached(path: Path, required: tuple[str, ...]) -> dict | None:
    """A cached result, or None (with a warning) when the file is truncated or corrupt: it is recomputed."""
    try:
        result = json.loads(path.read_text())
        if isinstance(result, dict) and all(k in result for k in required):
            return result
        problem = "it does not hold a sweep result"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    warnings.warn(f"Sweep cache file {path} is unreadable ({problem}); recomputing that point.", stacklevel=3)
    return None


def sweep(model, tokenizer, strategies: list[str], ratios: list[float], split: str = "test", context: int = 256,
          eval_tokens: int = 8192, recover_steps: int = 0, calib_sequences: int = 16, calib_tokens: int = 256,
          seed: int = 0, latency: bool = True, use_cache: bool = True, rescale: str = "original", calibration=None,
          executor: str = "in-process", address: str | None = None, num_cpus: int | None = None):
    """Yield the unpruned baseline first, then one result per (strategy, ratio).

    calibration: optional zero-argument callable returning the Calibration of `calib_sequences` × `calib_tokens`
    train tokens (seed `seed`), for a caller that already holds one (the dashboard shares a single one between
    its pages); by default it is computed here, once, when the first strategy needs it.
    executor "ray": the points run as Ray tasks on the cluster at `address` (default: a local Ray with
    `num_cpus` cores, all of them by default) and arrive in the order they finish, cached ones first.
    """
    for name in strategies:
        get_strategy(name)  # validate up front, before any work
    check_rescale(rescale)
    ray_executor.check_executor(executor)
    ray = ray_executor.connect(address, num_cpus) if executor == "ray" else None  # before anything is written
    _check_cache_dir()
    settings = {"model": fingerprint(model), "split": split, "context": context, "eval_tokens": eval_tokens,
                "recover_steps": recover_steps, "calib_sequences": calib_sequences, "calib_tokens": calib_tokens,
                "seed": seed, "device": str(next(model.parameters()).device),
                "latency": TIMING if latency else False}
    base_key = {**settings, "point": "unpruned"}
    opts = {"split": split, "context": context, "eval_tokens": eval_tokens, "latency": latency,
            "recover_steps": recover_steps, "seed": seed, "rescale": rescale}
    points = [({**settings, "strategy": name, "ratio": ratio, "rescale": rescale}, name, ratio)
              for name in strategies for ratio in ratios]

    def calibrated():
        return calibration() if calibration is not None else \
            calibrate(model, tokenizer, n_sequences=calib_sequences, seq_len=calib_tokens, seed=seed)
    if ray is not None:
        yield from _on_ray(ray, model, tokenizer, base_key, points, use_cache, calibrated, opts)
        return
    baseline = _cached(base_key, use_cache, lambda: _evaluate(model, tokenizer, "unpruned", 0.0, split, context,
                                                              eval_tokens, latency, None))
    yield baseline
    calib = None
    for key, name, ratio in points:
        def compute():
            nonlocal calib
            if calib is None and get_strategy(name).needs_calibration:
                calib = calibrated()
            return _point(model, tokenizer, calib, baseline, opts, name, ratio)
        yield _cached(key, use_cache, compute)


def _point(model, tokenizer, calib, baseline: dict, opts: dict, name: str, ratio: float) -> dict:
    """One (strategy, ratio) point: prune, score (and recover): the same function in-process and on Ray."""
    strategy = get_strategy(name)
    split, context, eval_tokens, seed, rescale = (opts[k] for k in ("split", "context", "eval_tokens", "seed",
                                                                    "rescale"))
    dims = plan_key_dims(model, ratio=ratio)
    pruned = prune(model, name, dims, calib if strategy.needs_calibration else None, seed=seed, rescale=rescale).model
    result = _evaluate(pruned, tokenizer, name, ratio, split, context, eval_tokens, opts["latency"], baseline)
    result["rescale"], result["readout"] = rescale, readout_label(model, rescale)
    result["calibration"] = calib.label if strategy.needs_calibration else "none (data-free)"
    if opts["recover_steps"]:
        recovered, _ = recover(pruned, tokenizer, steps=opts["recover_steps"], seed=seed)
        after = perplexity(recovered, tokenizer, split, context, max_tokens=eval_tokens)
        result["recovered_perplexity"] = after["perplexity"]
        result["recovered_delta_vs_unpruned"] = after["perplexity"] / baseline["perplexity"] - 1
    return result


# ---- Ray: one task per point; the driver reads and writes the cache ------------------------------------

def _on_ray(ray, model, tokenizer, base_key, points, use_cache, calibrated, opts):
    device = str(next(model.parameters()).device)
    options = ray_executor.task_options(ray, device)
    baseline = _lookup(base_key, use_cache)
    if baseline is None:
        for _, result in ray_executor.run_unordered(ray, _baseline_task, (model, tokenizer, opts), [()], options):
            baseline = _store(base_key, result)
    yield baseline
    todo = []
    for key, name, ratio in points:
        hit = _lookup(key, use_cache)
        if hit is not None:
            yield hit
        else:
            todo.append((key, name, ratio))
    if not todo:
        return
    # one calibration for every point that needs it, computed once (as in-process) and shared through Ray
    calib = calibrated() if any(get_strategy(name).needs_calibration for _, name, _ in todo) else None
    items = [(name, ratio) for _, name, ratio in todo]
    keys = {(name, ratio): key for key, name, ratio in todo}
    for item, result in ray_executor.run_unordered(ray, _point_task, (model, tokenizer, calib, baseline, opts),
                                                   items, options):
        yield _store(keys[item], result)


def _worker_setup() -> None:
    from analysis.runtime import ready
    ready()  # the worker's own process: the CPU path for fla's ops and the project's model types


def _baseline_task(model, tokenizer, opts):
    _worker_setup()
    return _evaluate(model, tokenizer, "unpruned", 0.0, opts["split"], opts["context"], opts["eval_tokens"],
                     opts["latency"], None)


def _point_task(model, tokenizer, calib, baseline, opts, name, ratio):
    _worker_setup()
    return _point(model, tokenizer, calib, baseline, opts, name, ratio)


def _lookup(key: dict, use_cache: bool, required: tuple[str, ...] = ("perplexity", "strategy")) -> dict | None:
    """The cached result for `key` (marked cached), or None; `required` are the fields it must hold."""
    path = _cache_path(key)
    if use_cache and path.exists():
        cached = _read_cached(path, required)
        if cached is not None:
            return {**cached, "cached": True}
    return None


def _store(key: dict, result: dict) -> dict:
    _write_atomic(_cache_path(key), result)
    return {**result, "cached": False}


def _cached(key: dict, use_cache: bool, compute, required: tuple[str, ...] = ("perplexity", "strategy")) -> dict:
    """compute() once per key; `required` are the fields a cached result must hold to be trusted."""
    hit = _lookup(key, use_cache, required)
    return hit if hit is not None else _store(key, compute())


def _evaluate(model, tokenizer, strategy, ratio, split, context, eval_tokens, latency, baseline) -> dict:
    info = describe(model)
    ppl = perplexity(model, tokenizer, split, context, max_tokens=eval_tokens)
    result = {"strategy": strategy, "ratio": ratio, "head_k_dims": info.head_k_dims, "tiles": tiles(info.head_k_dims),
              "perplexity": ppl["perplexity"], "bits_per_byte": ppl["bits_per_byte"], "dataset": ppl["dataset"],
              "split": split, "context": context, "stride": ppl["stride"], "tokens": ppl["tokens"],
              "parameters": info.parameters, "state_bytes_per_sequence": info.state_bytes_per_sequence,
              "device": info.device, "dtype": info.dtype}
    if baseline is not None:
        result["delta_vs_unpruned"] = ppl["perplexity"] / baseline["perplexity"] - 1
    if latency:
        point = next(kernel_latency([info.head_k_dims[0]], batch=2, tokens=512, heads=info.value_heads,
                                    value_dim=info.head_v_dim, device=info.device,
                                    kernel=adapter_for(model).kernel, min_run_time=0.2))
        result["kernel_ms"] = point["ms"]
        result["kernel"] = {k: point[k] for k in ("median_ms", "spread", "repeats", "threads", "noisy", "timer")}
        result["kernel_timer"] = f"{point['op']}, B{point['batch']} T{point['tokens']} H{point['heads']} " \
                                 f"dv{point['value_dim']}, {point['dtype']} on {point['device_name']}"
    return result
