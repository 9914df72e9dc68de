"""Per-layer pruning ratios suggested from the measured rank profile: low rank utilization → prune more.

A layer whose states use a fraction u_l of their directions keeps a fraction of its key channels
proportional to u_l: keep_l = clip(c · u_l, 1 − max_ratio, 1 − min_ratio), with the one scale c (found by
bisection) that makes the channel-weighted mean ratio equal the target. With `round_to`, each layer's
kept dim is then moved to a kernel-tile multiple (the values `plan_key_dims` can produce), greedily, so
that the total number of kept channels stays as close to the target as the tiles allow.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.errors import AnalysisError
from analysis.models.key_plan import ROUNDINGS


def suggest_ratios(rank_utilization_per_layer, target_ratio: float, min_ratio: float = 0.0, max_ratio: float = 0.9,
                   round_to: int | None = None, key_dims=None) -> list[float]:
    """One ratio per layer whose (key-dim weighted) mean is `target_ratio`; see the module docstring."""
    u = [float(x) for x in rank_utilization_per_layer]
    if not u:
        raise AnalysisError("The rank profile is empty; measure the states of at least one layer first.")
    if not 0 <= min_ratio <= max_ratio < 1:
        raise AnalysisError(f"Need 0 ≤ min ratio ≤ max ratio < 1, got {min_ratio} and {max_ratio}.")
    if not min_ratio <= target_ratio <= max_ratio:
        raise AnalysisError(f"The target ratio {target_ratio} is outside [{min_ratio}, {max_ratio}]; "
                            "choose a target between the minimum and maximum ratio.")
    if key_dims is not None and len(key_dims) != len(u):
        raise AnalysisError(f"Got {len(key_dims)} key dims for {len(u)} layers; give one per layer.")
    if round_to not in ROUNDINGS:
        raise AnalysisError(f"Rounding must be one of 16, 32 or 64 channels, got {round_to}.")
    if round_to and key_dims is None:
        raise AnalysisError("Rounding to kernel tiles needs each layer's key dim; pass key_dims.")
    weights = [float(d) for d in key_dims] if key_dims is not None else [1.0] * len(u)
    finite = [x for x in u if math.isfinite(x)]
    u = [max(0.0, x) if math.isfinite(x) else (sum(finite) / len(finite) if finite else 0.0) for x in u]
    keep = _keep_fractions(u, weights, 1 - target_ratio, 1 - max_ratio, 1 - min_ratio)
    if round_to:
        ratios = _round_to_tiles(keep, [int(d) for d in key_dims], round_to, 1 - target_ratio)
    else:
        ratios = [1 - f for f in keep]
    return [max(0.0, round(r, 12)) for r in ratios]  # drop float dust; 12 digits keep floor(dk·(1−ρ)) exact


def _keep_fractions(u, w, goal, lo, hi) -> list[float]:
    """clip(c·u_l, lo, hi) with Σ w_l f_l = goal · Σ w_l; uniform when the profile carries no information."""
    if max(u) <= 0:
        return [goal] * len(u)
    u = [max(x, 1e-9 * max(u)) for x in u]  # a dead layer still keeps a little when the target needs it

    def mean(c):
        return sum(wi * min(hi, max(lo, c * ui)) for wi, ui in zip(w, u)) / sum(w)

    a, b = 0.0, 1.0
    while mean(b) < goal and b < 1e30:  # mean(c) rises with c up to hi ≥ goal
        b *= 2
    for _ in range(200):
        mid = (a + b) / 2
        a, b = (mid, b) if mean(mid) < goal else (a, mid)
    return [min(hi, max(lo, b * ui)) for ui in u]


def _round_to_tiles(keep, dims, step, goal) -> list[float]:
    """Move each kept dim to a multiple of `step` (or the full dim), keeping Σ kept near goal · Σ dims."""
    exact = [f * d for f, d in zip(keep, dims)]
    options = [sorted({min(d, m) for m in range(step, d + step, step)}) for d in dims]
    chosen = [min(opts, key=lambda v: (abs(v - x), v)) for opts, x in zip(options, exact)]
    target = goal * sum(dims)
    while True:
        gap = target - sum(chosen)
        best = None
        for layer, (opts, v) in enumerate(zip(options, chosen)):
            i = opts.index(v) + (1 if gap > 0 else -1)
            if 0 <= i < len(opts) and abs(gap - (opts[i] - v)) < abs(gap):
                cost = abs(opts[i] - exact[layer]) - abs(v - exact[layer])  # least departure from the profile
                if best is None or cost < best[0]:
                    best = (cost, layer, opts[i])
        if best is None:
            break
        chosen[best[1]] = best[2]
    return [1 - v / d for v, d in zip(chosen, dims)]


@dataclass(frozen=True)
class Suggestion:
    """The suggested ratios and, beside them, what the profile asked for before tile rounding."""
    ratios: list[float]
    unrounded: list[float]
    round_to: int | None

    @property
    def rounding_changed(self) -> bool:
        return any(abs(a - b) > 1e-9 for a, b in zip(self.ratios, self.unrounded))

    @property
    def uniform(self) -> bool:
        return len(set(round(r, 9) for r in self.ratios)) == 1

    def note(self) -> str | None:
        """One sentence when rounding changed the suggestion (None when it did not)."""
        if not self.round_to or not self.rounding_changed:
            return None
        unrounded = " / ".join(f"{r:.3f}" for r in self.unrounded)
        rounded = " / ".join(f"{r:.3f}" for r in self.ratios)
        if self.uniform and len(set(round(r, 3) for r in self.unrounded)) > 1:
            what = f"made the suggestion uniform ({self.ratios[0]:.3g} for every layer)"
        else:
            what = f"changed the suggestion to {rounded}"
        return (f"Rounding kept dims to multiples of {self.round_to} {what}; the rank profile alone suggests "
                f"{unrounded} (by layer). Turn rounding off to keep that per-layer shape.")


def suggest(rank_utilization_per_layer, target_ratio: float, round_to: int | None = None, key_dims=None,
            **limits) -> Suggestion:
    """suggest_ratios with and without the tile rounding, so a page can show both."""
    rounded = suggest_ratios(rank_utilization_per_layer, target_ratio, round_to=round_to, key_dims=key_dims, **limits)
    unrounded = (suggest_ratios(rank_utilization_per_layer, target_ratio, key_dims=key_dims, **limits)
                 if round_to else rounded)
    return Suggestion(rounded, unrounded, round_to)
