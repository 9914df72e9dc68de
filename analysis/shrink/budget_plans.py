"""Plans that keep a given fraction of the recurrent state, three ways: shrink dk, drop heads, or both.

A linear layer's state is Hv·dk·dv numbers; the model's is their sum (analysis.models.load.describe). For a
budget f (the fraction of the state kept):
- "dk": every layer keeps dk' = ⌊dk·f⌋ channels per key head (all heads stay);
- "heads": every layer keeps whole value heads, an expressible count (analysis.shrink.heads.prune.keepable_counts)
  per layer, chosen so the model's state is as close to f as the counts allow: each layer starts at the count
  nearest Hv·f, then single-step moves of one layer's count are taken while they bring the total closer (a layer
  with 4 value heads on 2 key heads cannot keep 3: at f = 0.75 some layers keep 4 and others 2);
- "mixed": each layer keeps the expressible head count nearest Hv·√f, then dk' = ⌊dk·f·Hv/Hv'⌋ (at most dk):
  half the reduction, in log terms, from each axis.
What a plan really keeps is measured, not assumed: every point reports its own state bytes.
"""
from __future__ import annotations

import math

from analysis.errors import AnalysisError
from analysis.models.load import linear_layers
from analysis.shrink.heads.prune import keepable_counts

KINDS = ("dk", "heads", "mixed")


def _state(layers, counts, dims) -> int:
    return sum(n * d * layer.value_dim for layer, n, d in zip(layers, counts, dims))


def _nearest(options: list[int], target: float) -> int:
    return min(options, key=lambda n: (abs(n - target), -n))


def budget_plan(model, kind: str, fraction: float) -> dict:
    """{"head_counts": value heads kept per layer, "dims": dk' per layer, "state_fraction": what it keeps}."""
    if kind not in KINDS:
        raise AnalysisError(f"Unknown kind of plan {kind!r}; choose one of {', '.join(KINDS)}.")
    if not 0 < fraction < 1:
        raise AnalysisError(f"A state budget is a fraction in (0, 1) of the state kept, got {fraction}.")
    layers = linear_layers(model)
    full_counts, full_dims = [l.value_heads for l in layers], [l.key_dim for l in layers]
    total = _state(layers, full_counts, full_dims)
    counts, dims = list(full_counts), list(full_dims)
    if kind == "dk":
        dims = [max(1, math.floor(d * fraction + 1e-9)) for d in full_dims]
    elif kind == "heads":
        counts = _head_counts(layers, fraction * total)
    else:
        counts = [_nearest(keepable_counts(l), l.value_heads * math.sqrt(fraction)) for l in layers]
        dims = [min(d, max(1, math.floor(d * fraction * l.value_heads / n + 1e-9)))
                for l, n, d in zip(layers, counts, full_dims)]
    return {"head_counts": counts, "dims": dims, "state_fraction": _state(layers, counts, dims) / total}


def _head_counts(layers, target: float) -> list[int]:
    """Expressible head counts per layer whose state is as close to `target` as single-step moves get."""
    dims = [l.key_dim for l in layers]
    counts = [_nearest(keepable_counts(l), l.value_heads * target / _state(layers, [l.value_heads for l in layers],
                                                                             dims)) for l in layers]
    while True:
        now = abs(_state(layers, counts, dims) - target)
        best = None
        for i, layer in enumerate(layers):
            options = keepable_counts(layer)
            at = options.index(counts[i])
            for step in (-1, 1):
                if 0 <= at + step < len(options):
                    trial = counts[:i] + [options[at + step]] + counts[i + 1:]
                    gap = abs(_state(layers, trial, dims) - target)
                    if gap < now - 1e-9 and (best is None or gap < best[0]):
                        best = (gap, trial)
        if best is None:
            return counts
        counts = best[1]
