"""Per-layer pruning ratios chosen from a measured sensitivity map, under a state or kernel-tile budget.

Additive model: pruning layer l to key dim d costs loss_l(d), measured with every other layer intact
(loss 0 at the full dim), and a whole allocation is predicted to cost Σ_l loss_l(d_l). Each layer may
take its full dim or any dim the map measured (with tile rounding: only multiples of the rounding).
Among allocations whose cost (fp32 state bytes, or 64-row kernel tiles, summed over layers and heads)
fits the budget, an exact dynamic programme over layers finds the least predicted loss. A mean-ratio
target means the state bytes of the uniform plan at that ratio, so both plans hold the same state.
`verify` then prunes for real and reports measured against predicted.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import reduce

from analysis.errors import AnalysisError
from analysis.models import TILE_ROWS
from analysis.prune import ROUNDINGS, plan_key_dims, prune
from analysis.sensitivity import MapSettings, _Measure, calibration_for

UNITS = {"state_bytes": "fp32 state bytes per sequence", "tiles": "kernel tiles (64 key rows, summed over heads)"}


@dataclass(frozen=True)
class Option:
    ratio: float
    dim: int
    loss: float


@dataclass
class Allocation:
    strategy: str
    ratios: list[float]
    dims: list[int]
    predicted_loss: float
    predicted_value: float
    baseline_value: float
    cost: int
    budget: int
    unit: str
    target: str
    metric: str
    points_used: int

    def as_dict(self) -> dict:
        return asdict(self)


def layer_cost(row: dict, dim: int, unit: str) -> int:
    if unit == "state_bytes":
        return row["heads"] * dim * row["value_dim"] * 4
    return row["heads"] * -(-dim // TILE_ROWS)


def options(smap: dict, round_to: int | None = None) -> list[list[Option]]:
    """Per layer: the full dim (loss 0) and every measured dim (a multiple of `round_to` when rounding)."""
    if round_to not in ROUNDINGS:
        raise AnalysisError(f"Rounding must be one of 16, 32 or 64 channels, got {round_to}.")
    per_layer = [[Option(0.0, row["head_k_dim"], 0.0)] for row in smap["layers"]]
    for p in smap["points"]:
        dk = smap["layers"][p["layer"]]["head_k_dim"]
        if p["loss"] is None or not math.isfinite(p["loss"]):
            continue
        if round_to and p["head_k_dim"] % round_to and p["head_k_dim"] != dk:
            continue
        if any(o.dim == p["head_k_dim"] for o in per_layer[p["layer"]]):
            continue  # two ratios that floor to the same dim: keep the first measured
        per_layer[p["layer"]].append(Option(p["ratio"], p["head_k_dim"], p["loss"]))
    return [sorted(opts, key=lambda o: -o.dim) for opts in per_layer]


def knapsack(costs: list[list[int]], losses: list[list[float]], budget: int) -> tuple[list[int], float] | None:
    """Exact: the choice per layer minimising Σ loss with Σ cost ≤ budget (ties: the larger total cost).

    Dynamic programme over layers on the reachable cost sums (integers divided by their gcd), so it is
    exact for any losses; the number of sums is bounded by budget/gcd + 1.
    """
    g = reduce(math.gcd, [c for row in costs for c in row] + [budget]) or 1
    best: dict[int, tuple[float, tuple[int, ...]]] = {0: (0.0, ())}
    for row_costs, row_losses in zip(costs, losses):
        nxt: dict[int, tuple[float, tuple[int, ...]]] = {}
        for total, (loss, picks) in best.items():
            for i, (c, l) in enumerate(zip(row_costs, row_losses)):
                t = total + c // g
                if t * g > budget:
                    continue
                cand = (loss + l, picks + (i,))
                if t not in nxt or cand[0] < nxt[t][0] - 1e-15:
                    nxt[t] = cand
        best = nxt
        if not best:
            return None
    total = min(best, key=lambda t: (best[t][0], -t))
    return list(best[total][1]), best[total][0]


def uniform_budget(smap: dict, mean_ratio: float, round_to: int | None, unit: str) -> int:
    """Cost of the uniform plan at `mean_ratio` (as plan_key_dims would plan it)."""
    if not 0 <= mean_ratio < 1:
        raise AnalysisError(f"The target mean ratio must be in [0, 1), got {mean_ratio}.")
    total = 0
    for row in smap["layers"]:
        keep = math.floor(row["head_k_dim"] * (1 - mean_ratio) + 1e-9)
        if round_to:
            keep = min(row["head_k_dim"], max(round_to, round_to * round(keep / round_to)))
        total += layer_cost(row, max(keep, 1), unit)
    return total


def allocate(smap: dict, *, mean_ratio: float | None = None, state_bytes: int | None = None,
             tiles: int | None = None, round_to: int | None = None) -> Allocation:
    """Least predicted loss under one budget: a mean ratio (same state bytes as uniform), state bytes, or tiles."""
    if sum(x is not None for x in (mean_ratio, state_bytes, tiles)) != 1:
        raise AnalysisError("Give exactly one target: a mean ratio, a state-bytes budget or a kernel-tile budget.")
    if len(smap["layers"]) < 2:
        raise AnalysisError("This model has a single linear-attention layer, so there is nothing to allocate "
                            "between layers; prune it with a uniform ratio (the map still shows its sensitivity).")
    if smap.get("baseline") is None or not smap["points"]:
        raise AnalysisError("The sensitivity map has no measured points yet; run (or resume) the map first.")
    unit = "tiles" if tiles is not None else "state_bytes"
    if mean_ratio is not None:
        budget, target = uniform_budget(smap, mean_ratio, round_to, unit), f"mean ratio {mean_ratio:g}"
    else:
        budget = int(tiles if tiles is not None else state_bytes)
        target = f"{budget:,} {UNITS[unit]}"
    opts = options(smap, round_to)
    costs = [[layer_cost(row, o.dim, unit) for o in layer] for row, layer in zip(smap["layers"], opts)]
    low, high = sum(min(c) for c in costs), sum(max(c) for c in costs)
    if not low <= budget <= high:
        if mean_ratio is not None:
            top = 1 - low / high
            raise AnalysisError(f"A mean ratio of {mean_ratio:g} needs {budget:,} {UNITS[unit]}, outside what this "
                                f"map can allocate ({low:,} to {high:,}); choose a mean ratio between 0 and "
                                f"{top:.3f} or measure the map at higher ratios.")
        raise AnalysisError(f"A budget of {budget:,} {UNITS[unit]} cannot be met: allocations from this map range "
                            f"from {low:,} (every layer at its smallest measured key dim) to {high:,} (unpruned); "
                            "choose a budget in that range.")
    picks, loss = knapsack(costs, [[o.loss for o in layer] for layer in opts], budget)
    chosen = [layer[i] for layer, i in zip(opts, picks)]
    base = smap["baseline"]
    predicted = base * math.exp(loss) if smap["metric"] == "ppl" else base - loss
    return Allocation(strategy=smap["strategy"], ratios=[o.ratio for o in chosen], dims=[o.dim for o in chosen],
                      predicted_loss=loss, predicted_value=predicted, baseline_value=base,
                      cost=sum(c[i] for c, i in zip(costs, picks)), budget=budget, unit=unit, target=target,
                      metric=smap["metric"], points_used=sum(len(layer) - 1 for layer in opts))


def verify(model, tokenizer, smap: dict, alloc: Allocation, task=None, calibration=None) -> dict:
    """Prune with the allocation for real and measure it exactly as the map was measured."""
    s = MapSettings(**{**smap["settings"], "ratios": tuple(smap["settings"]["ratios"])})
    dims = plan_key_dims(model, ratios=alloc.ratios)
    if dims != alloc.dims:
        raise AnalysisError(f"The allocation's key dims {alloc.dims} do not fit this model's plan {dims}; "
                            "use the model the map was measured on.")
    if calibration is None and _needs_calibration(alloc.strategy):
        calibration = calibration_for(model, tokenizer, s, task)
    pruned = prune(model, alloc.strategy, dims, calibration, seed=s.seed).model
    measure = _Measure(tokenizer, s, task)
    value = measure(pruned)["value"]
    loss = measure.loss(value, alloc.baseline_value)
    return {"measured_value": value, "measured_loss": loss, "predicted_value": alloc.predicted_value,
            "predicted_loss": alloc.predicted_loss, "error": loss - alloc.predicted_loss, "measure": measure.label(),
            "model": pruned}


def _needs_calibration(strategy: str) -> bool:
    from analysis.strategies import get_strategy
    return get_strategy(strategy).needs_calibration
