"""Strategies × ratios (× optional recovery) as a generator of results, cached on disk.

Each result: strategy, ratio, key dims, tiles, perplexity (dataset/split/context/stride/tokens), Δ vs
the unpruned model, parameters, state bytes per sequence, kernel latency at the layer-0 key dim. A
rerun with the same model weights and settings is served from the cache instantly.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


from analysis.calibration import calibrate
from analysis.evaluate import perplexity
from analysis.latency import kernel_latency
from analysis.models import REPO_ROOT, describe
from analysis.prune import plan_key_dims, prune, tiles
from analysis.recovery import recover
from analysis.strategies import get_strategy

TIMING = "repeats-iqr-1thread"  # in the cache key: points timed the older way (one median, all threads) are redone
CACHE_DIR = Path(os.environ.get("STATE_RANK_CACHE", REPO_ROOT / ".cache" / "sweeps"))


def fingerprint(model) -> str:
    """Hash of the weights themselves (not the path): a retrained or pruned model gets a new key."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().cpu().numpy().tobytes()[:4096])
        h.update(str(tuple(tensor.shape)).encode())
        h.update(f"{float(tensor.float().sum()):.6e}".encode())
    return h.hexdigest()[:16]


def _cache_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return CACHE_DIR / f"{digest}.json"


def _write_atomic(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


def sweep(model, tokenizer, strategies: list[str], ratios: list[float], split: str = "test", context: int = 256,
          eval_tokens: int = 8192, recover_steps: int = 0, calib_sequences: int = 16, seed: int = 0,
          latency: bool = True, use_cache: bool = True, calibration=None):
    """Yield the unpruned baseline first, then one result per (strategy, ratio).

    calibration: optional zero-argument callable returning the Calibration of `calib_sequences` × 256 train
    tokens (seed `seed`), for a caller that already holds one (the dashboard shares a single one between its
    pages); by default it is computed here, once, when the first strategy needs it.
    """
    for name in strategies:
        get_strategy(name)  # validate up front, before any work
    settings = {"model": fingerprint(model), "split": split, "context": context, "eval_tokens": eval_tokens,
                "recover_steps": recover_steps, "calib_sequences": calib_sequences, "seed": seed,
                "device": str(next(model.parameters()).device), "latency": TIMING if latency else False}
    base_key = {**settings, "point": "unpruned"}
    baseline = _cached(base_key, use_cache, lambda: _evaluate(model, tokenizer, "unpruned", 0.0, split, context,
                                                              eval_tokens, latency, None))
    yield baseline
    calib = None
    for name in strategies:
        for ratio in ratios:
            key = {**settings, "strategy": name, "ratio": ratio}

            def compute():
                nonlocal calib
                if calib is None and get_strategy(name).needs_calibration:
                    calib = calibration() if calibration is not None else \
                        calibrate(model, tokenizer, n_sequences=calib_sequences, seed=seed)
                dims = plan_key_dims(model, ratio=ratio)
                pruned = prune(model, name, dims, calib, seed=seed).model
                result = _evaluate(pruned, tokenizer, name, ratio, split, context, eval_tokens, latency, baseline)
                if recover_steps:
                    recovered, _ = recover(pruned, tokenizer, steps=recover_steps, seed=seed)
                    after = perplexity(recovered, tokenizer, split, context, max_tokens=eval_tokens)
                    result["recovered_perplexity"] = after["perplexity"]
                    result["recovered_delta_vs_unpruned"] = after["perplexity"] / baseline["perplexity"] - 1
                return result
            yield _cached(key, use_cache, compute)


def _cached(key: dict, use_cache: bool, compute) -> dict:
    path = _cache_path(key)
    if use_cache and path.exists():
        return {**json.loads(path.read_text()), "cached": True}
    result = compute()
    _write_atomic(path, result)
    return {**result, "cached": False}


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
                                    gated="gated" in info.model_type, min_run_time=0.2))
        result["kernel_ms"] = point["ms"]
        result["kernel"] = {k: point[k] for k in ("median_ms", "spread", "repeats", "threads", "noisy", "timer")}
        result["kernel_timer"] = f"{point['op']}, B{point['batch']} T{point['tokens']} H{point['heads']} " \
                                 f"dv{point['value_dim']}, {point['dtype']} on {point['device_name']}"
    return result
