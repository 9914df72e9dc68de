"""Measured plans as points of one chart: Δ quality against fp32 state bytes, whatever measured them.

A point is a plain dict: where it came from (`source`: prune, recovered, verify, sweep, saved), the plan
(strategy, key dims per layer and the original ones), its state bytes and kernel tiles, the measured value
(perplexity or recall accuracy), the unpruned model's value on the same measurement, and their change
(`delta`: perplexity / unpruned − 1, or recall accuracy − unpruned), with `measure` naming the text and
tokens. Points measured differently (the test split at the Prune page's settings, the validation split of
Verify) compare only by their Δ, so the chart shows one measurement at a time and the Pareto front is taken
within it. The records come from `analysis.evaluate.measure.measure` dicts, an allocate-and-choose report, a
`sweep --json` result list and a saved `pruning.json`, so the CLI's outputs place points too.
"""
from __future__ import annotations

import csv
import io
import json

from analysis.models.key_plan import kept_dim, tiles_of
from analysis.models.load import describe

FIELDS = ("id", "source", "label", "strategy", "head_k_dims", "original_head_k_dims", "ratios", "head_strategy",
          "value_heads", "state_bytes", "kernel_tiles", "metric", "value", "baseline", "delta", "measure")


def point(source: str, label: str, strategy: str, dims: list[int], original: list[int], state_bytes: int,
          metric: str, value: float, baseline: float, measure: str, heads: list[int] | None = None) -> dict:
    """One measured plan. heads: value heads per layer, for the kernel-tile count (None: not counted)."""
    return {"id": f"{source}:{label}:{'_'.join(map(str, dims))}:{measure}", "source": source, "label": label,
            "strategy": strategy, "head_k_dims": list(dims), "original_head_k_dims": list(original),
            "ratios": restoring_ratios(dims, original), "head_strategy": None, "value_heads": None,
            "state_bytes": int(state_bytes),
            "kernel_tiles": None if heads is None else sum(h * tiles_of(d) for h, d in zip(heads, dims)),
            "metric": metric, "value": value, "baseline": baseline,
            "delta": value / baseline - 1 if metric == "ppl" else value - baseline, "measure": measure}


def restoring_ratios(dims: list[int], original: list[int]) -> list[float]:
    """Ratios with 4 decimals (as the inputs hold them) that plan exactly `dims`: floor(dk (1 − ρ)) = dk′.
    1 − dk′/dk itself when its rounding keeps that, else the middle of the interval of ratios that give dk′."""
    out = []
    for d, dk in zip(dims, original):
        rho = round(1 - d / dk, 4)
        if kept_dim(dk, rho) != d:
            rho = round(1 - (d + 0.5) / dk, 4)
        out.append(rho)
    return out


def not_restorable(p: dict) -> str | None:
    """Why a point's plan cannot go back into the Prune page's key-channel inputs (None: it can): a plan that
    removed whole heads is more than its key dims."""
    from analysis.shrink.strategies import STRATEGIES
    if p.get("value_heads") or p["strategy"] not in STRATEGIES:
        heads = " ".join(map(str, p.get("value_heads") or []))
        return (f"{p['label']} removed whole heads ({p.get('head_strategy') or 'no key-channel strategy'}: {heads} "
                "value heads per layer), so its plan is not put into the inputs: the chart restores key-channel "
                "plans only; choose Plan: Heads or Both above to prune heads.")
    return None


def value_heads(model) -> list[int]:
    """Value heads of each linear-attention layer (a kernel tile holds 64 key rows of one of them)."""
    return [b.value_heads for b in describe(model).blocks if b.linear_layer is not None]


def quality(measured: dict) -> tuple[str, float, str]:
    """(metric, value, what was measured) of an analysis.evaluate.measure.measure dict: perplexity, or recall
    accuracy at the model's trained pair count."""
    if "perplexity" in measured:
        p = measured["perplexity"]
        return "ppl", p["perplexity"], perplexity_label(p["dataset"], p["tokens"], p["context"])
    r = measured["recall"]
    row = next((b for b in r["by_pairs"] if b["pairs"] == r["trained_pairs"]), r["by_pairs"][-1])
    return "recall", row["accuracy"], (f"recall accuracy, {row['pairs']} pairs, {r['sequences_per_point']} synthetic "
                                       f"sequences (seed {r['seed']})")


def perplexity_label(dataset: str, tokens: int, context: int) -> str:
    return f"perplexity, {dataset}, first {tokens:,} tokens, context {context}"


def from_measures(source: str, label: str, strategy: str, before: dict, after: dict, heads: list[int] | None = None,
                  head_strategy: str | None = None) -> dict:
    """A prune (or recovery) measured before and after with the same settings. A plan that removed whole heads
    (value heads per layer differ) carries them and its head strategy: the chart places it, but its key dims
    alone are not its plan."""
    metric, value, measure = quality(after)
    _, base, _ = quality(before)
    out = point(source, label, strategy, after["head_k_dims"], before["head_k_dims"],
                after["state_bytes_per_sequence"], metric, value, base, measure, heads)
    kept = after.get("value_heads_per_layer")
    if kept and kept != before.get("value_heads_per_layer"):
        out.update(head_strategy=head_strategy or "heads", value_heads=list(kept), id=f"{out['id']}:heads_"
                   + "_".join(map(str, kept)))
    return out


def from_choice(report: dict, label: str) -> list[dict]:
    """Every plan an allocate-and-choose report measured (Verify and choose, `prune --allocate`)."""
    choice = report["choice"]
    metric = report["metric"]
    original = report.get("original_head_k_dims")
    out = []
    held = choice.get("held_out") or {}
    if "baseline_value" in held:  # the answer: the chosen plan and uniform on held-out tokens, a group of its own
        bytes_of = {tuple(c["dims"]): c["state_bytes"] for c in choice["candidates"]}
        uniform, chosen = held.get("uniform"), held["chosen"]
        answered = [("uniform", uniform)] if uniform else []
        if not uniform or uniform["dims"] != chosen["dims"]:
            answered.append((chosen["name"], chosen))
        for name, got in answered:
            out.append(point("verify", f"{label}: {name}, held-out", report["strategy"], got["dims"],
                             original or got["dims"], bytes_of[tuple(got["dims"])], metric, got["value"],
                             held["baseline_value"], held["measure"], report.get("heads")))
    for c in choice["candidates"]:  # last: the chart opens on the choice tokens, where every plan was measured
        if c["same_as"] != c["name"]:
            continue  # measured once, under the first plan with these dims
        out.append(point("verify", f"{label}: {c['name']}", report["strategy"], c["dims"], original or c["dims"],
                         c["state_bytes"], metric, c["measured_value"], choice["baseline_value"], choice["measure"],
                         report.get("heads")))
    return out


def from_sweep(results: list[dict], label: str = "sweep") -> list[dict]:
    """The points of one sweep (the page's, or `sweep --json`'s `results`), against its unpruned point."""
    base = next((r for r in results if r["strategy"] == "unpruned"), None)
    if base is None:
        return []
    out = []
    for r in results:
        if r["strategy"] == "unpruned" or "perplexity" not in r:
            continue
        measure = perplexity_label(r["dataset"], r["tokens"], r["context"])
        out.append(point("sweep", f"{label}: {r['strategy']} ρ {r['ratio']:g}", r["strategy"], r["head_k_dims"],
                         base["head_k_dims"], r["state_bytes_per_sequence"], "ppl", r["perplexity"],
                         base["perplexity"], measure))
        if r.get("recovered_perplexity") is not None:
            out.append(point("sweep", f"{label}: {r['strategy']} ρ {r['ratio']:g} + recovery", r["strategy"],
                             r["head_k_dims"], base["head_k_dims"], r["state_bytes_per_sequence"], "ppl",
                             r["recovered_perplexity"], base["perplexity"], measure))
    return out


def from_pruning(run, label: str) -> dict | None:
    """The saved model of a pruning.json (an analysis.shrink.prune_run.PruneRun), or None when it carries no
    before/after measurement."""
    before, after = run.measured.get("before"), run.measured.get("recovered" if run.saved_model == "recovered"
                                                                   else "after")
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return None
    try:
        return from_measures("saved", label, run.plan.get("strategy"), before, after,
                             head_strategy=(run.plan.get("heads") or {}).get("strategy"))
    except (KeyError, TypeError, StopIteration):
        return None


def pareto(points: list[dict]) -> list[str]:
    """Ids of the points no other point beats on both state bytes and Δ (less is better for both; recall: Δ
    accuracy, more is better)."""
    def cost(p):
        return (p["state_bytes"], p["delta"] if p["metric"] == "ppl" else -p["delta"])
    front = []
    for p in points:
        a = cost(p)
        if not any(cost(q)[0] <= a[0] and cost(q)[1] <= a[1] and cost(q) != a for q in points):
            front.append(p["id"])
    return front


def to_csv(points: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, FIELDS, extrasaction="ignore")
    writer.writeheader()
    for p in points:
        writer.writerow({k: " ".join(map(str, p[k])) if isinstance(p[k], list) else p[k] for k in FIELDS})
    return out.getvalue()


def to_json(points: list[dict]) -> str:
    """Every point, marked `pareto` when it is on the front of its own measurement."""
    front = {i for m in {p["measure"] for p in points} for i in pareto([p for p in points if p["measure"] == m])}
    return json.dumps({"kind": "plan-history", "points": [{**p, "pareto": p["id"] in front} for p in points]},
                      indent=2)
