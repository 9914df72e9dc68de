"""Per-layer pruning ratios chosen from a measured sensitivity map, under a state or kernel-tile budget.

Additive model: pruning layer l to key dim d costs loss_l(d), measured with every other layer intact
(loss 0 at the full dim), and a whole allocation is predicted to cost Σ_l loss_l(d_l). Each layer may
take its full dim or any dim the map measured (with tile rounding: only multiples of the rounding).
Among allocations whose cost (fp32 state bytes, or 64-row kernel tiles, summed over layers and heads)
fits the budget, an exact dynamic programme over layers finds the least predicted loss. A mean-ratio
target means the state bytes of the uniform plan at that ratio, so both plans hold the same state.

The measured losses are first made monotone: clamped at 0 (a one-layer "gain" is measurement noise, and
the knapsack would otherwise buy it with unused bytes) and non-decreasing in the ratio (running max), so
pruning a layer less never predicts more loss; among equally good plans the one spending the most of the
budget wins. `verify` prunes for real and reports measured against predicted; `choose_plan` measures the
knapsack plan, the uniform plan and the rank-suggested plan (same budget) on the map's own split
(validation, never test) and keeps the best measured one, because the additive model's margins are
often below the noise. It measures on more tokens than the map (CHOICE_TOKEN_FACTOR), and a plan replaces
uniform only when it measures better by more than SIGNIFICANCE paired standard errors over windows:
with 4,096 validation tokens a plan that won by noise lost on the test split by 3 standard errors.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import reduce

from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.io.point_identity import model_identity
from analysis.shrink.number_format import signed
from analysis.shrink.predict import predict
from analysis.shrink.prune_workflow import prune_then_measure
from analysis.models.channel_group import fp32_state_bytes
from analysis.models.key_plan import ROUNDINGS, kept_dim, plan_key_dims, tiles_of
from analysis.evaluate.perplexity import paired_difference
from analysis.shrink.sensitivity import MapSettings, MapMeasure, calibration_for

CHOICE_TOKEN_FACTOR = 4  # candidate plans are measured on 4× the map's tokens of its split (4,096 → 16,384)
SIGNIFICANCE = 2.0       # paired standard errors by which a plan must beat uniform to replace it
YOURS = "your plan"      # the user's own plan, measured beside the others
UNITS = {"state_bytes": "fp32 state bytes per sequence", "tiles": "kernel tiles (64 key rows, summed over heads)"}


@dataclass(frozen=True)
class Option:
    ratio: float
    dim: int
    loss: float             # monotone: max(0, running max of the measured losses at this dim or larger ratios)
    measured: float = 0.0   # the map's raw value


@dataclass
class Allocation:
    strategy: str
    ratios: list[float]
    dims: list[int]
    predicted_loss: float     # analysis.shrink.predict's: the raw map, summed (what every page shows for a plan)
    predicted_value: float
    objective_loss: float     # what the knapsack minimised: the same sum over the monotone, clamped map
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
        return fp32_state_bytes(row["heads"], dim, row["value_dim"])
    return row["heads"] * tiles_of(dim)


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
        per_layer[p["layer"]].append(Option(p["ratio"], p["head_k_dim"], p["loss"], p["loss"]))
    return [monotone(sorted(opts, key=lambda o: -o.dim)) for opts in per_layer]


def monotone(layer: list[Option]) -> list[Option]:
    """Options ordered by falling dim, with losses clamped at 0 and never decreasing as the dim falls."""
    out, floor = [], 0.0
    for o in layer:
        floor = max(floor, o.measured)
        out.append(Option(o.ratio, o.dim, floor, o.measured))
    return out


def charged(ratios, row) -> list[tuple[float | None, int | None]]:
    """What the allocator charges one layer at each ratio of a map row (losses in the order of `ratios`, None where
    not measured): as `monotone`, the measured loss clamped at 0 and never below a smaller ratio's; with the
    index of the measured ratio that sets it (None where the charge is the clamp, 0)."""
    out = []
    for r in ratios:
        measured = [(loss, j) for j, (q, loss) in enumerate(zip(ratios, row))
                    if q <= r and loss is not None and math.isfinite(loss)]
        if row[list(ratios).index(r)] is None:
            out.append((None, None))
            continue
        top, source = max(measured)
        out.append((top, source) if top > 0 else (0.0, None))
    return out


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
    least = min(loss for loss, _ in best.values())
    # among plans as good as the best (to rounding), the one spending the most of the budget
    total = max(t for t, (loss, _) in best.items() if loss <= least + 1e-12 * max(1.0, abs(least)))
    return list(best[total][1]), best[total][0]


def uniform_budget(smap: dict, mean_ratio: float, round_to: int | None, unit: str) -> int:
    """Cost of the uniform plan at `mean_ratio` (as plan_key_dims would plan it)."""
    if not 0 <= mean_ratio < 1:
        raise AnalysisError(f"The target mean ratio must be in [0, 1), got {mean_ratio}.")
    total = 0
    for row in smap["layers"]:
        total += layer_cost(row, max(kept_dim(row["head_k_dim"], mean_ratio, round_to), 1), unit)
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
    picks, objective = knapsack(costs, [[o.loss for o in layer] for layer in opts], budget)
    chosen = [layer[i] for layer, i in zip(opts, picks)]
    pred = predict(smap, [o.dim for o in chosen])
    return Allocation(strategy=smap["strategy"], ratios=[o.ratio for o in chosen], dims=[o.dim for o in chosen],
                      predicted_loss=pred["predicted_loss"], predicted_value=pred["predicted_value"],
                      objective_loss=objective, baseline_value=smap["baseline"],
                      cost=sum(c[i] for c, i in zip(costs, picks)), budget=budget, unit=unit, target=target,
                      metric=smap["metric"], points_used=sum(len(layer) - 1 for layer in opts))


def verify(model, tokenizer, smap: dict, alloc: Allocation, task=None, calibration=None) -> dict:
    """Prune with the allocation for real and measure it exactly as the map was measured."""
    dims = plan_key_dims(model, ratios=alloc.ratios)
    if dims != alloc.dims:
        raise AnalysisError(f"The allocation's key dims {alloc.dims} do not fit this model's plan {dims}; "
                            "use the model the map was measured on.")
    got = measure_plan(model, tokenizer, smap, alloc.ratios, alloc.strategy, alloc.baseline_value, task, calibration)
    return {"measured_value": got["value"], "measured_loss": got["loss"], "predicted_value": alloc.predicted_value,
            "predicted_loss": alloc.predicted_loss, "error": got["loss"] - alloc.predicted_loss,
            "measure": got["measure"], "model": got["model"]}


def measure_plan(model, tokenizer, smap: dict, ratios: list[float], strategy: str, baseline: float, task=None,
                 calibration=None) -> dict:
    """Prune with `ratios` and `strategy`, measured as the map was (its split, tokens, context)."""
    s = MapSettings(**{**smap["settings"], "ratios": tuple(smap["settings"]["ratios"])})
    dims = plan_key_dims(model, ratios=ratios)
    if calibration is None and _needs_calibration(strategy):
        calibration = calibration_for(model, tokenizer, s, task)
    measure = MapMeasure(tokenizer, s, task)
    run = prune_then_measure(model, tokenizer, strategy, dims, calibration, measure.evaluation(), seed=s.seed)
    value = measure.read(run.measured)["value"]
    return {"value": value, "loss": measure.loss(value, baseline), "measure": measure.label(), "dims": dims,
            "model": run.pruned.model}


def candidates(smap: dict, alloc: Allocation, round_to: int | None = None,
               mean_ratio: float | None = None) -> list[dict]:
    """Plans at the allocation's budget to measure against each other: the knapsack's, uniform, rank-suggested.

    Uniform: the mean ratio itself (a mean-ratio target), else the least shared ratio of the map whose cost
    fits. Rank-suggested: `analysis.shrink.suggest` at the same mean ratio from the map's rank utilization, kept
    only when it fits the budget. Predicted losses and their σ: `analysis.shrink.predict` (as every page shows them).
    """
    rows = smap["layers"]

    def plan(name: str, ratios: list[float], dims: list[int]) -> dict:
        return plan_entry(smap, name, ratios, dims, alloc.unit)

    def dims_at(ratios):
        out = []
        for row, r in zip(rows, ratios):
            out.append(max(1, kept_dim(row["head_k_dim"], r, round_to)))
        return out

    out = [plan("sensitivity-allocated", alloc.ratios, alloc.dims)]
    if mean_ratio is not None:
        out.append(plan("uniform", [mean_ratio] * len(rows), dims_at([mean_ratio] * len(rows))))
        from analysis.shrink.suggest import suggest_ratios
        u = [row.get("rank_utilization") for row in rows]
        if None not in u:
            try:
                r = suggest_ratios(u, mean_ratio, round_to=round_to, key_dims=[row["head_k_dim"] for row in rows])
                out.append(plan("rank-suggested", r, dims_at(r)))
            except AnalysisError:
                pass  # no rank suggestion at this target; the other plans are still compared
    else:
        for r in sorted({0.0, *smap["settings"]["ratios"]}):
            p = plan("uniform", [r] * len(rows), dims_at([r] * len(rows)))
            if p["cost"] <= alloc.budget:
                out.append(p)
                break
    return [p for p in out if p["cost"] <= alloc.budget]


def plans_beside(smap: dict, plan: dict, round_to: int | None = None) -> tuple[Allocation, list[dict]]:
    """The user's plan ({"ratios", "dims"}, named "your plan") and, at its state bytes, the allocator's plan, the
    uniform plan and the rank-suggested plan at its state-bytes mean ratio, each with its prediction: what the
    Prune page shows as the user types, and what Verify and choose measures."""
    mine = plan_entry(smap, YOURS, plan["ratios"], plan["dims"])
    mean = 1 - mine["state_bytes"] / sum(row["state_bytes"] for row in smap["layers"])
    alloc = allocate(smap, state_bytes=mine["state_bytes"], round_to=round_to)
    return alloc, [mine, *candidates(smap, alloc, round_to=round_to, mean_ratio=mean)]


def plan_entry(smap: dict, name: str, ratios: list[float], dims: list[int], unit: str = "state_bytes") -> dict:
    """A candidate plan: its ratios and dims, predicted loss ± σ (analysis.shrink.predict), cost and state bytes."""
    pred = predict(smap, dims)
    return {"name": name, "ratios": [float(r) for r in ratios], "dims": list(dims),
            "predicted_loss": pred["predicted_loss"], "predicted_uncertainty": pred["predicted_uncertainty"],
            "cost": sum(layer_cost(row, d, unit) for row, d in zip(smap["layers"], dims)),
            "state_bytes": pred["state_bytes"]}


def choice_settings(smap: dict) -> MapSettings:
    """The map's measurement on CHOICE_TOKEN_FACTOR times as many tokens of its split (perplexity clips at its end)."""
    s = smap["settings"]
    return MapSettings(**{**s, "ratios": tuple(s["ratios"]), "eval_tokens": s["eval_tokens"] * CHOICE_TOKEN_FACTOR})


def choose_plan(model, tokenizer, smap: dict, plans: list[dict], strategy: str, task=None,
                calibration=None, progress=None, cancel=None, use_cache: bool = True) -> dict:
    """Prune with each plan (to its dims), measure it (and the unpruned model, once) with `choice_settings`, keep
    the best.

    Each measurement goes through the one point cache (model identity, settings, strategy, dims), so measuring a
    new plan beside ones measured before costs one measurement. progress(fraction, text) names each step;
    cancel (analysis.runtime.cancel) is checked inside every measurement (a cancelled one is not cached).
    Returns `choose`'s result plus `measure` (what was measured) and the unpruned `baseline_value` on it."""
    say = progress or (lambda f, text: None)
    s = choice_settings(smap)
    distinct = len({tuple(p["dims"]) for p in plans})  # choose measures plans with the same dims once
    measure = MapMeasure(tokenizer, s, task, cancel)
    if use_cache:
        point_cache.check_writable()
    param = next(model.parameters())
    key = {"kind": "choice", "model": model_identity(model), "device": str(param.device), "dtype": str(param.dtype),
           **{k: v for k, v in s.as_dict().items() if k not in ("strategy", "ratios")}}
    fields = {"value": point_cache.NUMBER} if task is not None else \
        {"value": point_cache.NUMBER, "tokens": point_cache.INT, "windows": point_cache.NUMBER_LIST}
    held = [calibration]

    def calibrated():
        if held[0] is None and _needs_calibration(strategy):
            say(0.1, "calibrating…")
            held[0] = calibration_for(model, tokenizer, s, task, cancel)
        return held[0]

    def kept(got: dict) -> dict:
        return {k: got[k] for k in ("value", "tokens", "windows") if k in got}
    say(0.05, "measuring the unpruned model…")
    base = point_cache.cached({**key, "point": "unpruned"}, use_cache, lambda: kept(measure(model, per_window=True)),
                              fields)
    done = []

    def evaluate(plan):
        say(0.1 + 0.9 * len(done) / distinct, f"pruning and measuring {plan_phrase(plan['name'])} "
                                               f"({len(done) + 1} of {distinct})…")
        got = point_cache.cached({**key, "strategy": strategy, "dims": list(plan["dims"])}, use_cache,
                                 lambda: kept(measure.read(prune_then_measure(
                                     model, tokenizer, strategy, list(plan["dims"]), calibrated(),
                                     measure.evaluation(per_window=True), seed=s.seed, cancel=cancel).measured)),
                                 fields)
        done.append(plan["name"])
        return {"value": got["value"], "loss": measure.loss(got["value"], base["value"]), "windows": got.get("windows")}
    return {**choose(plans, evaluate), "measure": measure.label(base.get("tokens")), "baseline_value": base["value"]}


def allocate_and_choose(model, tokenizer, smap: dict, budget: dict | None, round_to: int | None = None, task=None,
                        calibration=None, progress=None, cancel=None, plan: dict | None = None) -> dict:
    """The allocate-and-choose workflow (CLI `prune --allocate` and the Prune page's "Verify and choose"):
    the knapsack allocation under `budget` ({"mean_ratio"}, {"state_bytes"} or {"tiles"}), the candidate plans
    at that budget, each pruned and measured once by `choose_plan`, and the report both show.

    plan: the user's own plan ({"ratios", "dims"}), measured beside the others as "your plan"; the budget is
    then its state bytes (`budget` is ignored), and uniform and rank-suggested take its state-bytes mean ratio.
    calibration: the map's calibration when the caller holds it (same sequences, tokens and seed as the map's
    settings), else computed here from them. Returns the allocation's fields plus `verification` (the
    knapsack plan, predicted against measured), `choice` (every candidate measured, the winner and why) and
    `map_settings`; `choice["ratios"]` is the plan to prune with.
    """
    if plan is not None:
        alloc, plans = plans_beside(smap, plan, round_to)
    else:
        alloc = allocate(smap, round_to=round_to, **budget)
        plans = candidates(smap, alloc, round_to=round_to, mean_ratio=budget.get("mean_ratio"))
    choice = choose_plan(model, tokenizer, smap, plans, alloc.strategy, task, calibration, progress=progress,
                         cancel=cancel)
    knap = next(c for c in choice["candidates"] if c["name"] == "sensitivity-allocated")
    rescale = choice["baseline_value"] / alloc.baseline_value  # the choice measures more tokens than the map
    verification = {"predicted_loss": alloc.predicted_loss, "measured_loss": knap["measured_loss"],
                    "error": knap["measured_loss"] - alloc.predicted_loss,
                    "predicted_value": alloc.predicted_value * rescale if alloc.metric == "ppl" else alloc.predicted_value,
                    "measured_value": knap["measured_value"], "measure": choice["measure"]}
    return {**alloc.as_dict(), "verification": verification, "choice": choice, "map_settings": smap["settings"],
            "original_head_k_dims": [row["head_k_dim"] for row in smap["layers"]],
            "heads": [row["heads"] for row in smap["layers"]]}


def choose(plans: list[dict], evaluate) -> dict:
    """Measure every plan with `evaluate(plan) -> {"value", "loss"[, "windows"]}` (validation split), keep the best.

    Plans with the same dims are measured once. Ties go to uniform (the simpler plan), then to list order.
    When `evaluate` gives per-window losses, a plan beats uniform only by more than SIGNIFICANCE paired
    standard errors, and every other plan carries its paired difference to the chosen one
    (`paired_vs_chosen`). Returns the plans with measured values, the winner's name, ratios and dims, a
    sentence saying why, and (when "your plan" was among them) a sentence on how it did (`yours`).
    """
    seen: dict[tuple, dict] = {}
    windows: dict[tuple, list | None] = {}
    measured = []
    for p in plans:
        key = tuple(p["dims"])
        if key not in seen:
            got = evaluate(p)
            seen[key] = {"measured_value": got["value"], "measured_loss": got["loss"]}
            windows[key] = got.get("windows")
        measured.append({**p, **seen[key], "same_as": next(q["name"] for q in measured + [p]
                                                          if tuple(q["dims"]) == key)})
    order = {"uniform": 0}
    best = min(measured, key=lambda p: (p["measured_loss"], order.get(p["name"], 1)))
    uniform = next((p for p in measured if p["name"] == "uniform"), None)
    noise = None
    if uniform is not None and windows.get(tuple(uniform["dims"])):
        for p in measured:
            if tuple(p["dims"]) != tuple(uniform["dims"]) and windows.get(tuple(p["dims"])):
                p["paired_vs_uniform"] = paired_difference(windows[tuple(uniform["dims"])], windows[tuple(p["dims"])])
        noise = best.get("paired_vs_uniform")
    if uniform is not None and tuple(best["dims"]) == tuple(uniform["dims"]):
        best = uniform
        reason = ("the map found nothing better than uniform: no other plan measured a lower validation loss "
                  f"than uniform's {signed(uniform['measured_loss'])}")
    elif noise is not None and noise["delta_log_ppl"] > -SIGNIFICANCE * noise["se"]:
        reason = (f"no plan beat uniform by more than {SIGNIFICANCE:g} paired standard errors: {best['name']} "
                  f"measured {signed(noise['delta_log_ppl'])} ± {noise['se']:.4f} nats/token against uniform "
                  f"over {noise['windows']} validation windows, within noise, so uniform is kept")
        best = uniform
    elif uniform is not None:
        reason = (f"{best['name']} measured the lowest validation loss, {signed(best['measured_loss'])} against "
                  f"uniform's {signed(uniform['measured_loss'])}")
        if noise is not None:
            reason += f" (paired difference {signed(noise['delta_log_ppl'])} ± {noise['se']:.4f} nats/token)"
    else:
        reason = f"{best['name']} measured the lowest validation loss ({signed(best['measured_loss'])})"
    if windows.get(tuple(best["dims"])):
        for p in measured:
            if tuple(p["dims"]) != tuple(best["dims"]) and windows.get(tuple(p["dims"])):
                p["paired_vs_chosen"] = paired_difference(windows[tuple(best["dims"])], windows[tuple(p["dims"])])
    yours = next((p for p in measured if p["name"] == YOURS), None)
    return {"winner": best["name"], "ratios": best["ratios"], "dims": best["dims"], "reason": reason,
            "candidates": measured, **({"yours": versus(yours, best)} if yours else {})}


def plan_phrase(name: str) -> str:
    """A plan's name inside a sentence: "your plan", "the uniform plan" (never "the your plan plan")."""
    return name if name == YOURS else f"the {name} plan"


def versus(plan: dict, chosen: dict) -> str:
    """How a plan did against the chosen one, with the paired noise when there is one."""
    if chosen["name"] == plan["name"]:
        return f"your plan is the chosen one, measured {signed(plan['measured_loss'])}"
    if tuple(plan["dims"]) == tuple(chosen["dims"]):
        return (f"your plan has the same dk' as {plan_phrase(chosen['name'])}, the chosen one, measured "
                f"{signed(plan['measured_loss'])}")
    d = plan.get("paired_vs_chosen")
    gap = plan["measured_loss"] - chosen["measured_loss"]
    word = "worse" if gap > 0 else "better"
    if d is None or not math.isfinite(d["se"]) or d["se"] == 0:
        return (f"your plan measured {signed(plan['measured_loss'])}, {word} than the chosen "
                f"{plan_phrase(chosen['name'])} by {abs(gap):.4f}")
    z = abs(d["delta_log_ppl"]) / d["se"]
    verdict = "more than noise" if z > SIGNIFICANCE else "within noise"
    return (f"your plan measured {signed(plan['measured_loss'])}, {word} than the chosen "
            f"{plan_phrase(chosen['name'])} by {signed(d['delta_log_ppl'])} ± {d['se']:.4f} nats/token (paired over "
            f"{d['windows']} windows, {z:.1f} SE): {verdict}")


def _needs_calibration(strategy: str) -> bool:
    from analysis.shrink.strategies import get_strategy
    return get_strategy(strategy).needs_calibration
