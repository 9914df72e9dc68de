"""A sensitivity map read from a user's file, checked before anything fits or sums it (issue 41, probe row 5).

The project writes maps with every number finite (non-finite ones become null, analysis.io.json_out), so a NaN or
an infinity in a map was put there by hand; so was a loss no measurement gives. Either would reach the curve fit
(scipy's PCHIP raises on overflowing slopes) or the perplexity change (exp of the summed losses overflows) as a
traceback. Here each is one sentence naming the cell and what to do.

Bounds: a perplexity map's loss is Δ log perplexity in nats/token. A uniform guess over a million-token vocabulary
is 13.8 nats, so a layer pruned alone that costs MAX_NATS = 100 nats/token (perplexity × e^100 ≈ 10^43) is no
measurement; and a plan sums its layers, so the layers' largest losses together stay under MAX_PLAN_NATS = 700
(e^700 ≈ 10^304, about the largest perplexity change a float holds). A recall map's loss is a drop in accuracy,
within ±1.
"""
from __future__ import annotations

import math

from analysis.errors import AnalysisError

MAX_NATS = 100.0
MAX_PLAN_NATS = 700.0
METRICS = ("ppl", "recall")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_map(smap: dict, where: str, redo: str = "measure the map again with `sensitivity --json`") -> None:
    """One sentence (AnalysisError) when the map `where` names has a structure the prediction cannot read, or a
    non-finite or absurd number, ending with `redo` (what to do); returns None for a sound map."""

    def refuse(what: str) -> None:
        raise AnalysisError(f"{where} {what}; {redo}.")

    metric = smap.get("metric")
    if metric not in METRICS:
        refuse(f"names the metric {metric!r}, not ppl or recall")
    layers = smap.get("layers")
    if not isinstance(layers, list) or not layers:
        refuse("has no per-layer rows (`layers`)")
    for i, row in enumerate(layers):
        if not isinstance(row, dict) or not all(_whole(row.get(k)) for k in ("head_k_dim", "heads", "value_dim",
                                                                              "state_bytes")):
            refuse(f"has a row for layer {i} without whole-number head_k_dim, heads, value_dim and state_bytes")
    ratios = (smap.get("settings") or {}).get("ratios") if isinstance(smap.get("settings"), dict) else None
    if not isinstance(ratios, list) or not ratios or not all(_number(r) and 0 < r < 1 for r in ratios):
        refuse("has no list of ratios in (0, 1) in its settings")
    _check_baseline(smap.get("baseline"), metric, refuse)
    points = smap.get("points")
    if not isinstance(points, list):
        refuse("has no list of measured points (`points`)")
    bound = MAX_NATS if metric == "ppl" else 1.0
    unit = "nats/token" if metric == "ppl" else "(a drop in recall accuracy)"
    largest = [0.0] * len(layers)
    for p in points:
        if not isinstance(p, dict) or p.get("layer") is None:
            continue
        layer = p["layer"]
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < len(layers):
            refuse(f"has a point for layer {layer!r}, not one of its {len(layers)} layers")
        dk = layers[layer]["head_k_dim"]
        if not _whole(p.get("head_k_dim")) or p["head_k_dim"] > dk:
            refuse(f"has a point of layer {layer} whose key dim {p.get('head_k_dim')!r} is not within 1..{dk}")
        cell = f"layer {layer}'s point at key dim {p['head_k_dim']}"
        for key in ("loss", "se", "value", "ratio"):
            value = p.get(key)
            if value is None:
                continue
            if not _number(value) or not math.isfinite(value):
                refuse(f"gives {cell} the {key} {value!r}, not a finite number")
        loss, se = p.get("loss"), p.get("se")
        if loss is not None and abs(loss) > bound:
            refuse(f"gives {cell} the loss {loss:.4g} {unit}, beyond ±{bound:g}: no measurement gives that")
        if se is not None and not 0 <= se <= bound:
            refuse(f"gives {cell} the standard error {se:.4g}, outside 0..{bound:g}")
        if loss is not None:
            largest[layer] = max(largest[layer], abs(loss) + 2 * (se or 0.0))
    if metric == "ppl" and sum(largest) > MAX_PLAN_NATS:
        refuse(f"sums to {sum(largest):.4g} nats/token over its layers' largest losses (±2 se), beyond "
               f"{MAX_PLAN_NATS:g}: a plan's predicted perplexity change would be past what a float holds")


def _check_baseline(base, metric: str, refuse) -> None:
    if base is None:
        return
    if not _number(base) or not math.isfinite(base):
        refuse(f"gives the unpruned model the value {base!r}, not a finite number")
    if metric == "ppl" and base < 1:
        refuse(f"gives the unpruned model a perplexity of {base:.4g}; a perplexity is at least 1")
    if metric == "recall" and not 0 <= base <= 1:
        refuse(f"gives the unpruned model a recall accuracy of {base:.4g}, outside 0..1")
