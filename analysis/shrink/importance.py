"""Channel importance under every strategy, kept masks, agreement between strategies, kept energy."""
from __future__ import annotations

import torch

from analysis.shrink.calibration import Calibration, CalibrationSettings
from analysis.errors import AnalysisError
from analysis.models.load import describe
from analysis.shrink.prune import strategy_problem
from analysis.models.key_plan import plan_key_dims
from analysis.shrink.strategies import get_strategy


def kept_mask(model, calib: Calibration | None, name: str, dims: list[int], seed: int = 0) -> list[torch.Tensor] | None:
    """Per layer, a bool mask [H, dk] of the channels an axis-aligned strategy keeps (None for a rotation).
    `calib` may be None for a strategy that needs no data."""
    strategy = get_strategy(name)
    if not strategy.axis_aligned:
        return None
    full = describe(model).head_k_dims
    layer_masks = []
    for layer, sel in enumerate(strategy.select(model, calib, dims, seed=seed)):
        mask = torch.zeros(sel.indices.shape[0], full[layer], dtype=torch.bool)
        mask.scatter_(1, sel.indices, True)
        layer_masks.append(mask)
    return layer_masks


def strategy_importance(model, calib: Calibration | None, name: str, ratio: float, seed: int = 0) -> dict:
    """One strategy at `ratio`: its per-channel scores and, where axis-aligned, its kept sets (plain lists); what the
    Channel importance page draws as soon as this strategy is done. `calib` None: a strategy that needs no data."""
    dims = plan_key_dims(model, ratio=ratio)
    strategy = get_strategy(name)
    masks = kept_mask(model, calib, name, dims, seed)
    return {"name": name, "label": strategy.label, "head_k_dims": dims,
            "scores": [s.tolist() for s in strategy.scores(model, calib, seed)],
            "kept": None if masks is None else [m.int().tolist() for m in masks]}


def agreement_of(masks: dict) -> list[list[float]]:
    """Mean Jaccard overlap over layers and heads of every pair of kept sets ({name: per-layer bool masks [H, dk]})."""
    return [[float(torch.stack([jaccard(ma, mb).mean() for ma, mb in zip(masks[a], masks[b])]).mean())
             for b in masks] for a in masks]


def jaccard(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|A∩B| / |A∪B| over the last dim (masks [..., dk])."""
    return (a & b).sum(-1).float() / (a | b).sum(-1).clamp(min=1).float()


def kept_energy(calib: Calibration, masks: dict) -> dict:
    """Per strategy and layer, mean over heads of ‖P x‖²/‖x‖² for the post-conv queries and keys."""
    out = {}
    for name, layer_masks in masks.items():
        rows = []
        for stats, mask in zip(calib.layers, layer_masks):
            energy = {}
            for label, acts in (("query", stats.q_acts), ("key", stats.k_acts)):
                e = acts.square()                                     # [N, H, dk]
                energy[label] = float(((e * mask).sum(-1) / e.sum(-1).clamp(min=1e-30)).mean())
            rows.append(energy)
        out[name] = rows
    return out


def importance_report(model, tokenizer, names: list[str], ratio: float,
                      settings: CalibrationSettings = CalibrationSettings(), calib: Calibration | None = None,
                      progress=None) -> dict:
    """Every strategy's scores on `calib` (default: drawn with `settings`, whose seed also seeds the scores).
    progress(fraction, step) is told before each strategy is scored and before the kept sets are compared."""
    report = progress or (lambda _fraction, _step: None)
    refused = {name: strategy_problem(model, get_strategy(name)) for name in names}
    refused = {name: why for name, why in refused.items() if why}
    names = [name for name in names if name not in refused]
    if not names:
        raise AnalysisError(next(iter(refused.values())))
    calib = calib or settings.calibrate(model, tokenizer)
    done = {}
    for i, name in enumerate(names):
        report(i / (len(names) + 1), f"scoring the channels and choosing the kept set: {get_strategy(name).label}")
        done[name] = strategy_importance(model, calib, name, ratio, settings.seed)
    report(len(names) / (len(names) + 1), "comparing the kept sets of every strategy")
    return {**combined(model, calib, done, ratio), "refused": refused}


def combined(model, calib: Calibration | None, done: dict, ratio: float) -> dict:
    """The whole report from each strategy's own (strategy_importance, in the order given): the kept sets' Jaccard
    agreement, and (with a calibration) the energy of the kept activations."""
    kept = {n: d["kept"] for n, d in done.items() if d["kept"] is not None}
    masks = {n: [torch.tensor(layer, dtype=torch.bool) for layer in layers] for n, layers in kept.items()}
    first = next(iter(done.values()))
    return {"calibration": calib.label if calib is not None else None, "ratio": ratio,
            "head_k_dims": first["head_k_dims"], "strategies": list(kept),
            "labels": {n: d["label"] for n, d in done.items()}, "scores": {n: d["scores"] for n, d in done.items()},
            "kept": kept, "agreement": agreement_of(masks),
            "kept_energy": kept_energy(calib, masks) if calib is not None else None}
