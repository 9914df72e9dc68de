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


def tiles_of(dk: int) -> int:
    """64-row state tiles of one head with key dim dk in fla's chunk kernel (the one tile count)."""
    return -(-dk // TILE_ROWS)


def tiles(dims: list[int]) -> list[int]:
    """Tiles per head for each dim: the latency steps at multiples of 64."""
    return [tiles_of(d) for d in dims]
