"""Channel importance under every strategy, kept masks, agreement between strategies, kept energy."""
from __future__ import annotations

import torch

from analysis.shrink.calibration import Calibration, calibrate
from analysis.errors import AnalysisError
from analysis.shrink.prune import plan_key_dims, strategy_problem
from analysis.shrink.strategies import get_strategy


def kept_masks(model, calib: Calibration, names: list[str], dims: list[int], seed: int = 0) -> dict:
    """Per axis-aligned strategy, per layer, a bool mask [H, dk] of kept channels."""
    masks = {}
    for name in names:
        strategy = get_strategy(name)
        if not strategy.axis_aligned:
            continue
        selections = strategy.select(model, calib, dims, seed=seed)
        layer_masks = []
        for layer, sel in enumerate(selections):
            heads, dk = sel.indices.shape[0], calib.layers[layer].q_acts.shape[-1]
            mask = torch.zeros(heads, dk, dtype=torch.bool)
            mask.scatter_(1, sel.indices, True)
            layer_masks.append(mask)
        masks[name] = layer_masks
    return masks


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


def importance_report(model, tokenizer, names: list[str], ratio: float, calib_sequences: int = 16,
                      calib_tokens: int = 256, seed: int = 0, calib: Calibration | None = None,
                      progress=None) -> dict:
    """progress(fraction, step) is told before each strategy is scored and before the kept sets are chosen."""
    report = progress or (lambda _fraction, _step: None)
    refused = {name: strategy_problem(model, get_strategy(name)) for name in names}
    refused = {name: why for name, why in refused.items() if why}
    names = [name for name in names if name not in refused]
    if not names:
        raise AnalysisError(next(iter(refused.values())))
    calib = calib or calibrate(model, tokenizer, calib_sequences, calib_tokens, seed)
    dims = plan_key_dims(model, ratio=ratio)
    scores = {}
    for i, name in enumerate(names):
        report(i / (len(names) + 1), f"scoring the channels: {get_strategy(name).label}")
        scores[name] = [s.tolist() for s in get_strategy(name).scores(model, calib, seed)]
    report(len(names) / (len(names) + 1), "choosing the kept sets of every strategy")
    masks = kept_masks(model, calib, names, dims, seed)
    aligned = list(masks)
    agreement = [[float(torch.stack([jaccard(ma, mb).mean() for ma, mb in zip(masks[a], masks[b])]).mean())
                  for b in aligned] for a in aligned]
    return {"calibration": calib.label, "ratio": ratio, "head_k_dims": dims, "strategies": aligned,
            "labels": {n: get_strategy(n).label for n in names}, "scores": scores,
            "kept": {n: [m.int().tolist() for m in ms] for n, ms in masks.items()},
            "agreement": agreement, "kept_energy": kept_energy(calib, masks), "refused": refused}
