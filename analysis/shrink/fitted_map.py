"""One fitted sensitivity map for the eye, the prediction and the allocator.

A map's cell is one layer pruned alone at one ratio, measured on 4,096 tokens: a noisy point. The physics says a
layer's loss is 0 at ρ = 0 and never falls as more of its key channels go. Each layer's curve is therefore fitted
through its cells by **weighted isotonic regression** (pool-adjacent-violators, weights 1/se², the cells' paired
standard errors), with the unpruned point (ρ = 0, loss 0) held fixed: the least-squares curve that is
non-decreasing in ρ and starts at 0, so it is ≥ 0 everywhere.

Why isotonic and not a monotone spline: a layer has 4–5 cells, too few to fit a spline's shape without assuming
it, and isotonic regression assumes nothing beyond the physics. Where the cells already rise it returns them
unchanged; where noise makes them fall (or dip below 0) it pools the offending neighbours into their weighted
mean, so a noisy negative or "free" cell at ρ 0.875 takes the value its neighbours support instead of inviting a
plan. A pooled value's standard error is 1/√Σw of the cells it pools (a cell pooled with the fixed unpruned point
keeps the standard error of the cells so pooled: 0 is then a fit, not a certainty).

The fitted map is the map itself with each point's `loss` and `se` replaced by the fitted values and the raw ones
kept as `raw_loss` / `raw_se`: analysis.shrink.predict (which interpolates it by PCHIP, monotone-preserving),
the allocator (which minimises exactly that prediction) and the heatmap (fitted cells, raw ± SE on hover) all read
it, so "the allocator's plan has the least predicted loss at its bytes" holds for the numbers the page shows.
"""
from __future__ import annotations

import math

FIT = ("weighted isotonic regression per layer (non-decreasing in ρ, 0 at ρ = 0, weights 1/se² of the cells' "
       "paired standard errors)")
SE_FLOOR = 1e-5  # a cell without a standard error (recall maps, old maps) weighs as the median cell's


def isotonic(values: list[float], weights: list[float]) -> list[tuple[float, float, int, int]]:
    """Pool-adjacent-violators: blocks (mean, weight, first, last) of the non-decreasing weighted LS fit."""
    blocks: list[list[float]] = []
    for i, (y, w) in enumerate(zip(values, weights)):
        blocks.append([y, w, i, i])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            y2, w2, _, last = blocks.pop()
            y1, w1, first, _ = blocks.pop()
            blocks.append([(y1 * w1 + y2 * w2) / (w1 + w2), w1 + w2, first, last])
    return [tuple(b) for b in blocks]


def fit_layer(cells: list[tuple[float, float, float | None]]) -> list[tuple[float, float | None]]:
    """cells: (ρ, loss, se) of one layer (any order, ρ > 0). Returns (fitted loss, fitted se) per cell, in the
    cells' order."""
    if not cells:
        return []
    order = sorted(range(len(cells)), key=lambda i: cells[i][0])
    known = [c[2] for c in cells if c[2] is not None and math.isfinite(c[2]) and c[2] > 0]
    fill = sorted(known)[len(known) // 2] if known else SE_FLOOR
    ses = [max(c[2] if c[2] is not None and math.isfinite(c[2]) and c[2] > 0 else fill, SE_FLOOR) for c in cells]
    anchor = 1e12 * max(1.0 / (s * s) for s in ses)  # the unpruned point, loss 0, held fixed
    ys = [0.0] + [cells[i][1] for i in order]
    ws = [anchor] + [1.0 / (ses[i] ** 2) for i in order]
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(cells)
    for mean, _w, first, last in isotonic(ys, ws):
        members = [k for k in range(first, last + 1) if k > 0]
        if not members:
            continue
        known_se = any(cells[order[k - 1]][2] is not None for k in members)
        se = 1.0 / math.sqrt(sum(ws[k] for k in members)) if known_se else None  # no SEs measured: none made up
        for k in members:
            out[order[k - 1]] = (0.0 if first == 0 else mean, se)
    return out


def fitted(smap: dict) -> dict:
    """The map with every layer's cells replaced by the fitted curve (idempotent; the raw cells kept)."""
    if smap.get("fit") == FIT:
        return smap
    points = [dict(p) for p in smap["points"]]
    by_layer: dict[int, list[int]] = {}
    for i, p in enumerate(points):
        if p.get("layer") is None or p.get("loss") is None or not math.isfinite(p["loss"]):
            continue
        by_layer.setdefault(p["layer"], []).append(i)
    for layer, idx in by_layer.items():
        # cells that floor to the same key dim are one measurement each; the fit sees them all
        cells = [(1 - points[i]["head_k_dim"] / smap["layers"][layer]["head_k_dim"], points[i]["loss"],
                  points[i].get("se")) for i in idx]
        for i, (loss, se) in zip(idx, fit_layer(cells)):
            points[i]["raw_loss"], points[i]["raw_se"] = points[i]["loss"], points[i].get("se")
            points[i]["loss"], points[i]["se"] = loss, se
    return {**smap, "points": points, "fit": FIT}


def raw(smap: dict) -> dict:
    """The map as measured (undoes `fitted`)."""
    if smap.get("fit") != FIT:
        return smap
    points = []
    for p in smap["points"]:
        q = dict(p)
        if "raw_loss" in q:
            q["loss"], q["se"] = q.pop("raw_loss"), q.pop("raw_se")
        points.append(q)
    return {k: v for k, v in {**smap, "points": points}.items() if k != "fit"}
