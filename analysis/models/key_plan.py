"""Key-dim plans: dk'_l = floor(dk_l (1 − ρ_l)) per linear layer, optional rounding, and the kernel's state tiles.

The one kept-dim formula: the Prune page, the CLI, the sweep, the allocator, the plan history and the State lab
all plan through here, so a ratio keeps the same number of key channels everywhere.
"""
from __future__ import annotations

import math

from analysis.archs import adapter_for
from analysis.archs.kernels import TILE_ROWS
from analysis.errors import AnalysisError
from analysis.models.layers import linear_layers

ROUNDINGS = (None, 16, 32, 64)


def key_dims(model) -> list[int]:
    return [layer.key_dim for layer in linear_layers(model)]


def kept_dim(dk: int, ratio: float, round_to: int | None = None) -> int:
    """floor(dk (1 − ρ)) (1e-9 absorbs ratios like 0.3 that are not exact in binary), then, with `round_to`, the
    nearest multiple of it within [round_to, dk]. Unchecked: may be 0 (plan_key_dims refuses that)."""
    keep = math.floor(dk * (1 - ratio) + 1e-9)
    if round_to:
        keep = min(dk, max(round_to, round_to * round(keep / round_to)))
    return keep


def plan_key_dims(model, ratio: float | None = None, ratios: list[float] | None = None,
                  round_to: int | None = None) -> list[int]:
    """dk'_l = floor(dk_l (1 − ρ_l)), optionally rounded to the nearest multiple of `round_to`."""
    adapter_for(model)  # one sentence for a family without an adapter
    dims = key_dims(model)
    if (ratio is None) == (ratios is None):
        raise AnalysisError("Give either one pruning ratio for all layers or one ratio per layer.")
    ratios = [ratio] * len(dims) if ratios is None else list(ratios)
    if len(ratios) != len(dims):
        raise AnalysisError(f"Got {len(ratios)} ratios for a model with {len(dims)} linear-attention layers; "
                            "give one per layer.")
    if round_to not in ROUNDINGS:
        raise AnalysisError(f"Rounding must be one of 16, 32 or 64 channels, got {round_to}.")
    planned = []
    for layer, (dk, rho) in enumerate(zip(dims, ratios)):
        if not (isinstance(rho, (int, float)) and 0 <= rho < 1):
            raise AnalysisError(f"Layer {layer}: the pruning ratio must be in [0, 1), got {rho}.")
        keep = kept_dim(dk, rho, round_to)
        if keep < 1:
            raise AnalysisError(f"Layer {layer}: ratio {rho} leaves no key channels of {dk}; use a smaller ratio.")
        planned.append(keep)
    return planned


def unchanged_plan(model, planned: list[int], ratio: float | None = None, ratios: list[float] | None = None,
                   round_to: int | None = None) -> str | None:
    """One sentence when a plan asked to prune (some ratio > 0) keeps every key channel, e.g. ratio 0.9999
    of 64 channels rounded up to a multiple of 64: the "pruned" model would be the original. None otherwise."""
    asked = [ratio] if ratios is None else list(ratios)
    if planned != key_dims(model) or not any(r and r > 0 for r in asked):
        return None
    why = f"after rounding to a multiple of {round_to}" if round_to else "at these ratios"
    fix = "a smaller rounding (16 or 32) or none" if round_to else "a larger ratio"
    return (f"This plan keeps every key channel {why} (key dims {planned}), so the pruned model would equal the "
            f"original; use {fix}.")


def pruning_key_dims(model, ratio: float | None = None, ratios: list[float] | None = None,
                     round_to: int | None = None) -> list[int]:
    """plan_key_dims for a plan that is to prune: refused (unchanged_plan's sentence) when it asked to prune and its
    rounding keeps every key channel. `plan` and `prune` both plan through here, so neither shows or saves as a
    prune what the other refuses."""
    dims = plan_key_dims(model, ratio=ratio, ratios=ratios, round_to=round_to)
    unchanged = unchanged_plan(model, dims, ratio, ratios, round_to)
    if unchanged:  # refused, not warned: a plan predicted at +0.0000, or a "pruned" copy equal to the original
        raise AnalysisError(unchanged)
    return dims


def tiles_of(dk: int) -> int:
    """64-row state tiles of one head with key dim dk in fla's chunk kernel (the one tile count)."""
    return -(-dk // TILE_ROWS)


def tiles(dims: list[int]) -> list[int]:
    """Tiles per head for each dim: the latency steps at multiples of 64."""
    return [tiles_of(d) for d in dims]
