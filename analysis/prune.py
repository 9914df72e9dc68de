"""Structured pruning of query/key channels: plan per-layer key dims, build a NEW smaller model, save it.

The same index set slices rows of q_proj and k_proj and channels of q_conv1d and k_conv1d, so q·k
products over the kept channels are unchanged before the in-kernel l2 norm (which then renormalises
over the survivors). By default the pruned model keeps each layer's original readout scale dk^-1/2, so it
equals the original model with the dropped channels zeroed (pure channel removal, see
analysis.pruned_models); rescale="default" keeps fla's dk'^-1/2 instead, as the reference code does.
The input model is never modified.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from analysis.defaults import RESCALES  # defined there: the CLI's --help stays torch-free
from analysis.errors import AnalysisError
from analysis.models import TILE_ROWS, attention_layers
from analysis.pruned_models import MAX_KERNEL_KEY_DIM, PRUNED_CONFIG_FOR, readout_key_dims
from analysis.safe_io import write_model_dir
from analysis.strategies import Selection, get_strategy

ROUNDINGS = (None, 16, 32, 64)


def key_dims(model) -> list[int]:
    return [a.head_k_dim for a in attention_layers(model)]


def plan_key_dims(model, ratio: float | None = None, ratios: list[float] | None = None,
                  round_to: int | None = None) -> list[int]:
    """dk'_l = floor(dk_l (1 − ρ_l)), optionally rounded to the nearest multiple of `round_to`."""
    if model.config.model_type not in PRUNED_CONFIG_FOR:
        raise AnalysisError(f"{model.config.model_type!r} has no query/key channels this tool can prune; "
                            "use a DeltaNet or Gated DeltaNet model.")
    dims = key_dims(model)
    if (ratio is None) == (ratios is None):
        raise AnalysisError("Give either one pruning ratio for all layers or one ratio per layer.")
    ratios = [ratio] * len(dims) if ratios is None else list(ratios)
    if len(ratios) != len(dims):
        raise AnalysisError(f"Got {len(ratios)} ratios for a model with {len(dims)} layers; give one per layer.")
    if round_to not in ROUNDINGS:
        raise AnalysisError(f"Rounding must be one of 16, 32 or 64 channels, got {round_to}.")
    planned = []
    for layer, (dk, rho) in enumerate(zip(dims, ratios)):
        if not (isinstance(rho, (int, float)) and 0 <= rho < 1):
            raise AnalysisError(f"Layer {layer}: the pruning ratio must be in [0, 1), got {rho}.")
        keep = math.floor(dk * (1 - rho) + 1e-9)
        if round_to:
            keep = min(dk, max(round_to, round_to * round(keep / round_to)))
        if keep < 1:
            raise AnalysisError(f"Layer {layer}: ratio {rho} leaves no key channels of {dk}; use a smaller ratio.")
        planned.append(keep)
    return planned


def tiles(dims: list[int]) -> list[int]:
    """64-row state tiles per head in fla's chunk kernel: the latency steps at multiples of 64."""
    return [-(-d // TILE_ROWS) for d in dims]


@dataclass
class PruneResult:
    model: object
    strategy: str
    dims: list[int]
    original_dims: list[int]
    selections: list[Selection]
    info: dict = field(default_factory=dict)


def check_rescale(rescale: str) -> str:
    if rescale not in RESCALES:
        raise AnalysisError(f"Readout scale must be one of {', '.join(RESCALES)}, got {rescale!r}.")
    return rescale


def prune(model, strategy: str, dims: list[int], calibration=None, seed: int = 0,
          rescale: str = "original") -> PruneResult:
    """A new model keeping `dims[l]` channels per head in layer l, chosen by `strategy`."""
    check_rescale(rescale)
    strat = get_strategy(strategy)
    original = key_dims(model)
    if len(dims) != len(original) or any(not 1 <= d <= o for d, o in zip(dims, original)):
        raise AnalysisError(f"Key dims {dims} do not fit the model's {original}; plan them with plan_key_dims.")
    if strat.needs_calibration and calibration is None:
        raise AnalysisError(f"The {strat.label} strategy needs calibration data; run calibrate() first.")
    selections = strat.select(model, calibration, dims, seed=seed)
    pruned = build_pruned(model, selections, rescale)
    return PruneResult(model=pruned, strategy=strategy, dims=list(dims),
                       original_dims=original, selections=selections,
                       info={"label": strat.label, "axis_aligned": strat.axis_aligned, "rescale": rescale,
                             "readout_key_dims": pruned.config.readout_key_dims,
                             "details": [s.details for s in selections if s.details]})


def build_pruned(model, selections: list[Selection], rescale: str = "original"):
    """Instantiate the pruned architecture and load the sliced (or PCA-projected) weights, strictly.

    rescale="original" keeps the input model's effective readout scale per layer (its own, or the one it
    kept from an earlier prune); "default" lets fla read out at dk'^-1/2.
    """
    from transformers import AutoModelForCausalLM
    check_rescale(rescale)
    dims = [s.kept for s in selections]
    config_cls = PRUNED_CONFIG_FOR[model.config.model_type]
    base = {k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "architectures")}
    readout = readout_key_dims(model) if rescale == "original" else None
    config = config_cls(**{**base, "head_k_dims": dims, "readout_key_dims": readout})
    if max(dims) > MAX_KERNEL_KEY_DIM:
        raise AnalysisError(f"Key dim {max(dims)} exceeds fla's kernel limit of {MAX_KERNEL_KEY_DIM}.")
    param = next(model.parameters())
    new = AutoModelForCausalLM.from_config(config).to(device=param.device, dtype=param.dtype).eval()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for layer, (attn, sel) in enumerate(zip(attention_layers(model), selections)):
        prefix = f"model.layers.{layer}.attn."
        for name in ("q_proj.weight", "k_proj.weight", "q_conv1d.weight", "k_conv1d.weight",
                     "q_conv1d.bias", "k_conv1d.bias"):
            if prefix + name in state:
                state[prefix + name] = _reduce(state[prefix + name], attn.num_heads, sel, conv="conv" in name)
    new.load_state_dict(state, strict=True)
    return new


def _reduce(tensor: torch.Tensor, heads: int, sel: Selection, conv: bool) -> torch.Tensor:
    """Keep the selected channels of a [H·dk, ...] tensor (or project it, for PCA)."""
    per_head = tensor.reshape(heads, -1, *tensor.shape[1:])
    if sel.indices is not None:
        idx = sel.indices.to(tensor.device).reshape(heads, -1, *([1] * (tensor.dim() - 1)))
        out = per_head.gather(1, idx.expand(-1, -1, *per_head.shape[2:]))
    else:
        T = sel.projection.to(tensor.device, torch.float32)            # [H, k, dk]
        mix = T.square() if conv else T                                # conv: squared-loading approximation
        out = torch.einsum("hkd,hd...->hk...", mix, per_head.float()).to(tensor.dtype)
    return out.reshape(-1, *tensor.shape[1:]).contiguous()


def save_model(model, out: str | Path, tokenizer=None, metadata: dict | None = None, overwrite: bool = False,
               extra=None, exists_hint: str = "choose a new directory or allow overwriting") -> Path:
    """save_pretrained (safetensors) into a temporary sibling, then rename: never a half-written model.

    `overwrite` replaces only a model directory this project wrote (see analysis.safe_io); `extra(tmp)`
    may add files before the directory is sealed."""
    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if metadata is not None:
            (tmp / "pruning.json").write_text(json.dumps(metadata, indent=2))
        if extra is not None:
            extra(tmp)
    return write_model_dir(out, fill, overwrite=overwrite, kind="pruned model", exists_hint=exists_hint)


def pruning_metadata(result: PruneResult, source: str, ratios) -> dict:
    return {"source": source, "strategy": result.strategy, "label": result.info["label"],
            "axis_aligned": result.info["axis_aligned"], "ratios": ratios, "original_head_k_dims": result.original_dims,
            "head_k_dims": result.dims, "rescale": result.info["rescale"], "readout": RESCALES[result.info["rescale"]],
            "readout_key_dims": result.info["readout_key_dims"], "tiles_per_head": tiles(result.dims),
            "kept_indices": [s.indices.tolist() if s.indices is not None else None for s in result.selections],
            "details": result.info["details"]}
