"""Per-layer pruning ratios chosen from a measured sensitivity map, under a state or kernel-tile budget.

Additive model: pruning layer l to key dim d costs loss_l(d), with every other layer intact (loss 0 at the full
dim), and a whole allocation is predicted to cost Σ_l loss_l(d_l). loss_l is **the prediction itself**
(analysis.shrink.predict on the fitted map of analysis.shrink.fitted_map: per layer non-decreasing in ρ, 0 at
ρ = 0), so the allocator minimises exactly what every page shows for a plan. Each layer may take any dim from
its smallest measured dim up to its full dim (with tile rounding: only multiples of the rounding); below the
smallest measured dim the prediction is only a lower bound, so the allocator never goes there. Among
allocations whose cost (fp32 state bytes, or 64-row kernel tiles, summed over layers and heads) fits the budget,
an exact dynamic programme over layers finds the least predicted loss; among equally good plans the one spending
the most of the budget wins. A mean-ratio target means the state bytes of the uniform plan at that ratio.

`recommend` is the plan the Prune page and `plan --recommend` give at a budget: the allocator's plan when its
prediction beats uniform's by more than SIGNIFICANCE standard errors of their difference, else uniform.
`choose_plan` measures the candidate plans on **choice** tokens (analysis.data.roles: the validation split right
after the map's tokens, 4× as many), keeps the best (a plan replaces uniform only when it measures better by
more than SIGNIFICANCE paired standard errors), and then measures the chosen plan and uniform on **held-out**
tokens (the test split): that is the answer shown, never a figure used to choose.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import reduce

from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.io.points import IN_PROCESS, Executor
from analysis.io.point_identity import model_identity
from analysis.shrink.number_format import signed
from analysis.shrink.predict import combine, layer_loss, layer_points, model_sigma, predict
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
    loss: float             # the prediction's loss for this layer at this dim (the fitted map, interpolated)
    measured: float = 0.0   # the map's raw value at a measured dim (0 elsewhere)


@dataclass
class Allocation:
    strategy: str
    ratios: list[float]
    dims: list[int]
    predicted_loss: float     # analysis.shrink.predict's (what every page shows for a plan)
    predicted_value: float
    objective_loss: float     # what the knapsack minimised: the same prediction
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
    """Per layer: every dim from the smallest measured one to the full dim (multiples of `round_to` when rounding,
    and the full dim), each with the prediction's loss for that layer at that dim (the fitted map)."""
    if round_to not in ROUNDINGS:
        raise AnalysisError(f"Rounding must be one of 16, 32 or 64 channels, got {round_to}.")
    out, fit = [], _fitted(smap)
    for row, points in zip(smap["layers"], layer_points(fit)):
        dk = row["head_k_dim"]
        measured = {p[3] for p in points}
        nominal = {p["head_k_dim"]: p["ratio"] for p in smap["points"]
                   if p.get("layer") == row["layer"] and p["head_k_dim"] in measured}
        raw = {p["head_k_dim"]: p.get("raw_loss", p["loss"]) for p in fit["points"]
               if p.get("layer") == row["layer"] and p.get("loss") is not None}
        smallest = min(measured)
        dims = [d for d in range(dk, smallest - 1, -1) if d == dk or not round_to or d % round_to == 0]
        layer = []
        for d in dims:
            got = layer_loss(points, dk, d)
            # off the map's grid: a ratio halfway inside the dim's floor interval, to 4 places (what the page's
            # inputs hold), so that kept_dim(ratio) gives this dim back
            ratio = 0.0 if d == dk else nominal.get(d, round(1 - (d + 0.5) / dk, 4))
            layer.append(Option(ratio, d, got["loss"], raw.get(d, 0.0)))
        out.append(layer)
    return out


def _fitted(smap: dict) -> dict:
    from analysis.shrink.fitted_map import fitted
    return fitted(smap)


def charged(ratios, row, ses=None) -> list[tuple[float | None, int | None]]:
    """What the prediction (and so the allocator) charges one layer at each ratio of a map row (losses in the order
    of `ratios`, None where not measured): the fitted map's value (analysis.shrink.fitted_map), with the index of
    the measured ratio it equals (None where the fit puts it at 0, pooled with the unpruned layer; another index
    where the fit pooled it with its neighbours)."""
    from analysis.shrink.fitted_map import fit_layer
    cells = [(r, x, None if ses is None else ses[j]) for j, (r, x) in enumerate(zip(ratios, row))
             if x is not None and math.isfinite(x)]
    fit = dict(zip([c[0] for c in cells], fit_layer(cells)))
    out = []
    for j, (r, x) in enumerate(zip(ratios, row)):
        if r not in fit:
            out.append((None, None))
            continue
        value = fit[r][0]
        if value == 0.0:
            out.append((0.0, None))
        elif math.isclose(value, x, rel_tol=1e-9, abs_tol=1e-12):
            out.append((value, j))
        else:
            out.append((value, next(i for i, q in enumerate(ratios) if q in fit and fit[q][0] == value)))
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
                      metric=smap["metric"], points_used=sum(len(points) - 1 for points in layer_points(smap)))


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


def _stretches(smap: dict):
    """The choice and held-out stretches for a perplexity map (analysis.data.roles): the choice tokens right after
    the map's own (its split), CHOICE_TOKEN_FACTOR times as many; held-out: the test split."""
    from analysis.data.roles import TextRole, TokenStretch, check_disjoint, held_out_stretch, map_stretch
    s = smap["settings"]
    mine = map_stretch(s["eval_tokens"], s["split"], s["context"])
    choice = TokenStretch(TextRole.CHOICE, s["split"], mine.end, s["eval_tokens"] * CHOICE_TOKEN_FACTOR, s["context"])
    held = held_out_stretch(s["eval_tokens"] * CHOICE_TOKEN_FACTOR, s["context"])  # 16,384 at the default map
    check_disjoint([mine, choice, held])
    return choice, held


def choose_plan(model, tokenizer, smap: dict, plans: list[dict], strategy: str, task=None,
                calibration=None, progress=None, cancel=None, use_cache: bool = True,
                executor: Executor = IN_PROCESS) -> dict:
    """Prune with each plan (to its dims), measure it (and the unpruned model, once) on the **choice** tokens, keep
    the best (`choose`); then measure the chosen plan and uniform on **held-out** tokens: `held_out`, the answer.

    Each measurement goes through the one point cache (analysis.shrink.stretch_measure), so measuring a new plan
    beside ones measured before costs one measurement. progress(fraction, text) names each step; cancel
    (analysis.runtime.cancel) is checked inside every measurement (a cancelled one is not cached). executor
    (analysis.io.points): the measurements of each stretch run in-process one after another or as Ray tasks at once.
    A recall map has no text: its plans are measured on its own synthetic sequences (`choose_recall`, in-process)."""
    if task is not None:
        if executor.on_ray:
            raise AnalysisError("A recall map's plans are measured in-process only; drop --executor ray.")
        return choose_recall(model, tokenizer, smap, plans, strategy, task, calibration, progress, cancel, use_cache)
    from analysis.shrink.stretch_measure import StretchMeasure
    say = progress or (lambda f, text: None)
    s = smap["settings"]
    choice_stretch, held_stretch = _stretches(smap)
    calib = {"calib_sequences": s["calib_sequences"], "calib_tokens": s["calib_tokens"]}
    on_choice = StretchMeasure(model, tokenizer, choice_stretch, strategy, calib, seed=s["seed"], cancel=cancel,
                               use_cache=use_cache)
    on_held = StretchMeasure(model, tokenizer, held_stretch, strategy, calib, seed=s["seed"], cancel=cancel,
                             use_cache=use_cache)
    held = [calibration]
    settings = MapSettings(**{**s, "ratios": tuple(s["ratios"])})

    def calibrated():
        if held[0] is None and _needs_calibration(strategy):
            say(0.1, "calibrating…")
            held[0] = calibration_for(model, tokenizer, settings, task, cancel)
        return held[0]
    first = {}
    for p in plans:
        first.setdefault(tuple(p["dims"]), p["name"])
    order = [None, *first]  # the unpruned model, then each distinct plan once
    distinct = len(first) + 2
    say(0.05, "measuring the unpruned model on the choice tokens…")
    for k, _ in enumerate(on_choice.measure_all(order, calibrated, executor)):
        if executor.on_ray:  # every point at once: say how many have come back
            say(0.1 + 0.8 * (k + 1) / len(order), f"{k + 1} of {len(order)} measured on the choice tokens "
                                                   "(one Ray task each)…")
        elif k + 1 < len(order):  # in-process: name the plan measured next
            say(0.1 + 0.9 * (k + 1) / distinct, f"pruning {plan_phrase(first[order[k + 1]])} and measuring it on the "
                                                 f"choice tokens ({k + 1} of {distinct - 2})…")
    base = on_choice.unpruned()

    def evaluate(plan):
        got = on_choice.plan(plan["dims"], calibrated)
        return {"value": got["value"], "loss": math.log(got["value"] / base["value"]), "windows": got["windows"]}
    chosen = choose(plans, evaluate)
    say(0.9, "measuring the chosen plan and uniform on held-out text…")
    uniform = [p["dims"] for p in plans if p["name"] == "uniform"][:1]
    for _ in on_held.measure_all([None, *uniform, chosen["dims"]], calibrated, executor):
        pass
    answer = held_out_answer(on_held, chosen, plans, calibrated)
    return {**chosen, "measure": choice_stretch.label(base["tokens"]), "baseline_value": base["value"],
            "choice_tokens": choice_stretch.as_dict(), "held_out": answer}


def held_out_answer(on_held, chosen: dict, plans: list[dict], calibrated) -> dict:
    """The chosen plan and uniform measured on held-out tokens, each ± its paired SE against the unpruned model,
    and their paired difference; the recommendation is uniform unless the chosen plan is better beyond noise."""
    uniform = next((p for p in plans if p["name"] == "uniform"), None)
    uni = None if uniform is None else on_held.loss_vs_unpruned(uniform["dims"], calibrated)
    same = uniform is not None and tuple(uniform["dims"]) == tuple(chosen["dims"])
    mine = uni if same else on_held.loss_vs_unpruned(chosen["dims"], calibrated)
    out = {"stretch": on_held.stretch.as_dict(), "measure": on_held.stretch.label(mine["tokens"]),
           "baseline_value": mine["baseline_value"],
           "chosen": {"name": chosen["winner"], "dims": chosen["dims"], "ratios": chosen["ratios"],
                      "delta": mine["delta"], "se": mine["se"], "value": mine["value"]}}
    if uniform is None:
        out.update(recommended=chosen["winner"], sentence=f"on new text: {signed(mine['delta'])} ± {mine['se']:.4f} "
                                                          "nats/token")
        return out
    paired = paired_difference(uni["per_window"], mine["per_window"])
    out["uniform"] = {"dims": uniform["dims"], "ratios": uniform["ratios"], "delta": uni["delta"], "se": uni["se"],
                      "value": uni["value"]}
    out["versus_uniform"] = paired
    better = not same and paired["delta_log_ppl"] < -SIGNIFICANCE * paired["se"]
    out["recommended"] = chosen["winner"] if better else "uniform"
    text = (f"on new text: {signed(mine['delta'])} ± {mine['se']:.4f} vs uniform {signed(uni['delta'])} ± {uni['se']:.4f} "
            f"nats/token")
    if same:
        text = f"on new text: uniform {signed(uni['delta'])} ± {uni['se']:.4f} nats/token. {UNIFORM_AS_GOOD}"
    elif better:
        text += (f"; the {chosen['winner']} plan is better by {-paired['delta_log_ppl']:.4f} ± {paired['se']:.4f} "
                 f"(paired over {paired['windows']} held-out windows): it is the recommendation")
    else:
        text += (f"; the difference {signed(paired['delta_log_ppl'])} ± {paired['se']:.4f} (paired over "
                 f"{paired['windows']} held-out windows) is within noise, so the recommendation is uniform: "
                 f"{UNIFORM_AS_GOOD}")
    out["sentence"] = text
    return out


def choose_recall(model, tokenizer, smap: dict, plans: list[dict], strategy: str, task, calibration=None,
                  progress=None, cancel=None, use_cache: bool = True) -> dict:
    """A recall map's plans, measured on the map's synthetic sequences (CHOICE_TOKEN_FACTOR× as many)."""
    say = progress or (lambda f, text: None)
    s = choice_settings(smap)
    distinct = len({tuple(p["dims"]) for p in plans})
    measure = MapMeasure(tokenizer, s, task, cancel)
    if use_cache:
        point_cache.check_writable()
    param = next(model.parameters())
    key = {"kind": "choice", "model": model_identity(model), "device": str(param.device), "dtype": str(param.dtype),
           **{k: v for k, v in s.as_dict().items() if k not in ("strategy", "ratios")}}
    fields = {"value": point_cache.NUMBER}
    held = [calibration]

    def calibrated():
        if held[0] is None and _needs_calibration(strategy):
            say(0.1, "calibrating…")
            held[0] = calibration_for(model, tokenizer, s, task, cancel)
        return held[0]
    say(0.05, "measuring the unpruned model…")
    base = point_cache.cached({**key, "point": "unpruned"}, use_cache, lambda: {"value": measure(model)["value"]},
                              fields)
    done = []

    def evaluate(plan):
        say(0.1 + 0.9 * len(done) / distinct, f"pruning {plan_phrase(plan['name'])} and measuring it "
                                               f"({len(done) + 1} of {distinct})…")
        got = point_cache.cached({**key, "strategy": strategy, "dims": list(plan["dims"])}, use_cache,
                                 lambda: {"value": measure.read(prune_then_measure(
                                     model, tokenizer, strategy, list(plan["dims"]), calibrated(),
                                     measure.evaluation(), seed=s.seed, cancel=cancel).measured)["value"]}, fields)
        done.append(plan["name"])
        return {"value": got["value"], "loss": measure.loss(got["value"], base["value"])}
    return {**choose(plans, evaluate), "measure": measure.label(), "baseline_value": base["value"]}


UNIFORM_AS_GOOD = "uniform is as good as anything the map can find here"


def recommend(smap: dict, mean_ratio: float, round_to: int | None = None) -> dict:
    """The plan the Prune page and `plan --recommend` give at a budget (the uniform plan's state bytes at
    `mean_ratio`): the allocator's plan when the map predicts it better than uniform by more than SIGNIFICANCE
    standard errors of the difference, else uniform. JSON-ready: `ratios` (one per linear layer), `head_k_dims`,
    the prediction fields (analysis.shrink.predict) and `versus_uniform`."""
    rows = smap["layers"]
    alloc = allocate(smap, mean_ratio=mean_ratio, round_to=round_to)
    u_dims = [max(1, kept_dim(row["head_k_dim"], mean_ratio, round_to)) for row in rows]
    uniform, mine = predict(smap, u_dims), predict(smap, alloc.dims)
    diff = prediction_difference(smap, alloc.dims, u_dims)
    better = diff["delta"] is not None and diff["delta"] < -SIGNIFICANCE * diff["sigma"]
    pick, ratios = (mine, alloc.ratios) if better else (uniform, [float(mean_ratio)] * len(rows))
    if better:
        reason = (f"the allocator's plan is predicted better than uniform by {-diff['delta']:.4f} ± "
                  f"{diff['sigma']:.4f} nats/token (more than {SIGNIFICANCE:g} σ of the difference)")
    else:
        reason = (f"the allocator's plan is predicted {signed(diff['delta'])} ± {diff['sigma']:.4f} against uniform, "
                  f"within {SIGNIFICANCE:g} σ: {UNIFORM_AS_GOOD}")
    return {"kind": "recommendation", "budget": {"mean_ratio": mean_ratio, "state_bytes": alloc.budget},
            "plan": "sensitivity-allocated" if better else "uniform", "reason": reason, **pick,
            "ratios": [float(r) for r in ratios], "head_k_dims": list(pick["head_k_dims"]),
            "allocator": {"ratios": alloc.ratios, "head_k_dims": alloc.dims, "predicted_loss": mine["predicted_loss"],
                          "predicted_uncertainty": mine["predicted_uncertainty"]},
            "uniform": {"ratios": [float(mean_ratio)] * len(rows), "head_k_dims": u_dims,
                        "predicted_loss": uniform["predicted_loss"],
                        "predicted_uncertainty": uniform["predicted_uncertainty"]},
            "versus_uniform": diff}


def prediction_difference(smap: dict, dims_a: list[int], dims_b: list[int]) -> dict:
    """Predicted loss of plan a minus plan b, with σ of the difference: only the layers where they differ carry
    fit noise and selection; the between-text term scales with what differs (analysis.shrink.predict's terms)."""
    a, b = predict(smap, dims_a), predict(smap, dims_b)
    if a["predicted_loss"] is None or b["predicted_loss"] is None:
        return {"delta": None, "sigma": None}
    differ = [(p, q) for p, q in zip(a["per_layer"], b["per_layer"]) if p["head_k_dim"] != q["head_k_dim"]]
    noise = sum((p["se"] or 0.0) ** 2 + (q["se"] or 0.0) ** 2 for p, q in differ)
    parts = model_sigma(smap["metric"], [p["loss"] - q["loss"] for p, q in differ],
                        [math.hypot(p.get("gap", 0.0), q.get("gap", 0.0)) for p, q in differ],
                        ses=[p["se"] or 0.0 for p, _ in differ], ratios=[abs(p["ratio"] - q["ratio"]) for p, q in differ])
    sigma = combine(math.sqrt(noise), parts)
    return {"delta": a["predicted_loss"] - b["predicted_loss"], "sigma": sigma}


def allocate_and_choose(model, tokenizer, smap: dict, budget: dict | None, round_to: int | None = None, task=None,
                        calibration=None, progress=None, cancel=None, plan: dict | None = None,
                        executor: Executor = IN_PROCESS) -> dict:
    """The allocate-and-choose workflow (CLI `prune --allocate` and the Prune page's "Verify and choose"):
    the knapsack allocation under `budget` ({"mean_ratio"}, {"state_bytes"} or {"tiles"}), the candidate plans
    at that budget, each pruned and measured once by `choose_plan`, and the report both show.

    plan: the user's own plan ({"ratios", "dims"}), measured beside the others as "your plan"; the budget is
    then its state bytes (`budget` is ignored), and uniform and rank-suggested take its state-bytes mean ratio.
    calibration: the map's calibration when the caller holds it (same sequences, tokens and seed as the map's
    settings), else computed here from them. Returns the allocation's fields plus `verification` (the
    knapsack plan, predicted against measured), `choice` (every candidate measured, the winner and why) and
    `map_settings`; `choice["ratios"]` is the plan to prune with. executor: where the measurements run
    (analysis.io.points).
    """
    if plan is not None:
        alloc, plans = plans_beside(smap, plan, round_to)
    else:
        alloc = allocate(smap, round_to=round_to, **budget)
        plans = candidates(smap, alloc, round_to=round_to, mean_ratio=budget.get("mean_ratio"))
    choice = choose_plan(model, tokenizer, smap, plans, alloc.strategy, task, calibration, progress=progress,
                         cancel=cancel, executor=executor)
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
    """Measure every plan with `evaluate(plan) -> {"value", "loss"[, "windows"]}` (choice tokens), keep the best.

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
        reason = ("the map found nothing better than uniform: no other plan measured a lower loss on the choice "
                  f"tokens than uniform's {signed(uniform['measured_loss'])}")
    elif noise is not None and noise["delta_log_ppl"] > -SIGNIFICANCE * noise["se"]:
        reason = (f"no plan beat uniform by more than {SIGNIFICANCE:g} paired standard errors: {best['name']} "
                  f"measured {signed(noise['delta_log_ppl'])} ± {noise['se']:.4f} nats/token against uniform "
                  f"over {noise['windows']} choice-token windows, within noise, so uniform is kept")
        best = uniform
    elif uniform is not None:
        reason = (f"{best['name']} measured the lowest loss on the choice tokens, {signed(best['measured_loss'])} "
                  f"against uniform's {signed(uniform['measured_loss'])}")
        if noise is not None:
            reason += f" (paired difference {signed(noise['delta_log_ppl'])} ± {noise['se']:.4f} nats/token)"
    else:
        reason = f"{best['name']} measured the lowest loss on the choice tokens ({signed(best['measured_loss'])})"
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
