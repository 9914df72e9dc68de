"""Head importance under every head strategy: scores per value head, the heads each keeps at a ratio, agreement."""
from __future__ import annotations


from analysis.models.load import linear_layers
from analysis.shrink.heads.prune import plan_head_counts, select_heads
from analysis.shrink.heads.strategies import get_head_strategy


def head_importance_report(model, calib, names: list[str], ratio: float, seed: int = 0, progress=None) -> dict:
    """Per strategy: [layer][head] scores, the value heads kept per layer at `ratio` (grouping respected), and the
    mean over layers of the Jaccard overlap of two strategies' kept sets. progress(fraction, step)."""
    report = progress or (lambda _f, _s: None)
    layers = linear_layers(model)
    counts = plan_head_counts(model, ratio=ratio)
    scores, kept = {}, {}
    for i, name in enumerate(names):
        strategy = get_head_strategy(name)
        report(i / len(names), f"scoring the heads: {strategy.label}")
        per_layer = strategy.scores(model, calib if strategy.needs_calibration else None, seed)
        scores[name] = [s.tolist() for s in per_layer]
        kept[name] = [select_heads(s, n, layer.key_heads).value_heads.tolist()
                      for s, n, layer in zip(per_layer, counts, layers)]

    def jaccard(a: str, b: str) -> float:
        return sum(len(set(x) & set(y)) / len(set(x) | set(y)) for x, y in zip(kept[a], kept[b])) / len(layers)
    return {"calibration": calib.label if calib is not None else "none", "ratio": ratio, "head_counts": counts,
            "strategies": list(names), "labels": {n: get_head_strategy(n).label for n in names},
            "units": {n: get_head_strategy(n).score_unit for n in names}, "scores": scores, "kept": kept,
            "agreement": [[jaccard(a, b) for b in names] for a in names]}
