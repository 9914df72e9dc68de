"""Head pruning: plan per-layer head counts, choose the heads (a head strategy), build a NEW model without them.

A plan counts VALUE heads (the heads that each hold a state; Mamba-2's heads). Key head h serves value heads
h·G … h·G+G−1 (G = Hv/Hk, one for DeltaNet, fla's default Gated DeltaNet and Kimi); the kernels need every kept
key head to serve the same number G' of kept value heads, so a layer can keep n = k'·G' value heads with
k' ≤ Hk key heads and G' ≤ G (n = 3 of Qwen3.5's 4 value heads on 2 key heads is not expressible: refused).
A key head goes with the last of its value heads: its q/k rows, conv channels and per-key decay rows.

The pruned model equals the original with the removed heads' outputs zeroed where the family's heads last stay
separate (before o_proj; before Mamba-2's grouped norm), see analysis.archs.heads; the input model is never
changed. A plan may also shrink dk: the channels are chosen on the original model (analysis.shrink.prune), and
the heads and the kept key heads' channels removed in one build (`prune_with_heads`).
"""
from __future__ import annotations

import copy
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import partial

import torch

from analysis.archs import adapter_for
from analysis.archs.heads import drop_blocks, original_head_counts
from analysis.errors import AnalysisError
from analysis.models.forward import is_streamed
from analysis.models.load import linear_layers
from analysis.shrink.prune import PruneResult, channel_edits, check_rescale, choose_channels, prune_info, rebuilt
from analysis.models.key_plan import key_dims
from analysis.shrink.strategies import get_strategy
from analysis.shrink.strategies import Selection


@dataclass
class HeadSelection:
    """What one layer keeps: sorted indices of its kept value heads and of the key heads they read."""
    value_heads: torch.Tensor
    key_heads: torch.Tensor

    @property
    def counts(self) -> tuple[int, int]:
        return len(self.key_heads), len(self.value_heads)


@dataclass(frozen=True)
class HeadPlan:
    """Value heads kept per linear layer and the strategy that chooses them."""
    strategy: str
    counts: tuple[int, ...]


def value_heads(model) -> list[int]:
    return [layer.value_heads for layer in linear_layers(model)]


def keepable_counts(layer) -> list[int]:
    """Value-head counts this layer can keep: k'·G' with k' ≤ its key heads, G' ≤ the value heads per key head."""
    group = layer.value_heads // layer.key_heads
    return sorted({k * g for k in range(1, layer.key_heads + 1) for g in range(1, group + 1)})


def plan_head_counts(model, ratio: float | None = None, counts=None) -> list[int]:
    """Value heads kept per linear layer: from one ratio of heads to drop in every layer (each layer keeps the
    expressible count nearest Hv·(1 − ratio), ties towards more heads, never none) or from explicit counts.
    Every bad plan is one sentence, before any work."""
    adapter = adapter_for(model)
    if adapter.head_refusal is not None:
        raise AnalysisError(adapter.head_refusal)
    layers = linear_layers(model)
    if (ratio is None) == (counts is None):
        raise AnalysisError("Give either one head-pruning ratio for every layer or one head count per layer.")
    if counts is None:
        if not (isinstance(ratio, (int, float)) and 0 <= ratio < 1):
            raise AnalysisError(f"The head-pruning ratio must be in [0, 1), got {ratio}.")
        return [min(keepable_counts(layer), key=lambda n: (abs(n - layer.value_heads * (1 - ratio)), -n))
                for layer in layers]
    counts = list(counts)
    if len(counts) != len(layers):
        blocks = adapter.blocks(model)
        softmax = [b.index for b in blocks if b.kind != "linear"]
        if len(counts) == len(blocks) and softmax:
            raise AnalysisError(f"Got {len(counts)} head counts, one per block, but block(s) "
                                f"{', '.join(map(str, softmax))} are softmax attention (or other mixers) with no "
                                f"recurrent state to prune; give one count per linear-attention layer "
                                f"({len(layers)}).")
        raise AnalysisError(f"Got {len(counts)} head counts for a model with {len(layers)} linear-attention layers; "
                            "give one per layer.")
    for layer, n in zip(layers, counts):
        where = f"Linear-attention layer {layer.index} (block {layer.block})"
        if int(n) != n:
            raise AnalysisError(f"{where}: head counts are whole numbers, got {n}.")
        if n < 1:
            raise AnalysisError(f"{where}: keeping {int(n)} heads drops every head of the layer, which would leave "
                                "it without a state; keep at least one.")
        if n > layer.value_heads:
            raise AnalysisError(f"{where} has {layer.value_heads} heads, fewer than the {int(n)} asked to keep; "
                                f"give at most {layer.value_heads}.")
        if n not in keepable_counts(layer):
            group = layer.value_heads // layer.key_heads
            raise AnalysisError(f"{where}: keeping {int(n)} of {layer.value_heads} value heads cannot be expressed: "
                                f"its {layer.key_heads} key heads each serve {group} value heads, and every kept key "
                                f"head must serve the same number; keep one of {keepable_counts(layer)}.")
    return [int(n) for n in counts]


def select_heads(scores: torch.Tensor, keep: int, key_heads: int) -> HeadSelection:
    """The `keep` value heads with the largest total score that the kernels can run: over every expressible
    (k', G') with k'·G' = keep, each key head keeps its G' best value heads and the k' key heads with the best
    such sums are kept; the best total wins (ties: more key heads)."""
    scores = scores.double()
    group = scores.numel() // key_heads
    per_key = scores.reshape(key_heads, group)
    best = None
    for k in range(key_heads, 0, -1):
        if keep % k or keep // k > group:
            continue
        top = per_key.topk(keep // k, dim=1)
        chosen = top.values.sum(1).topk(k).indices
        total = float(top.values[chosen].sum())
        if best is None or total > best[0] + 1e-12:
            heads = (chosen[:, None] * group + top.indices[chosen]).flatten()
            best = (total, heads)
    if best is None:
        raise AnalysisError(f"Keeping {keep} of {scores.numel()} value heads on {key_heads} key heads cannot be "
                            "expressed; keep a multiple of the value heads per key head, or fewer per key head.")
    kept = best[1].sort().values
    return HeadSelection(value_heads=kept, key_heads=torch.unique(kept // group))


def build_head_pruned(model, selections: list[HeadSelection], channels: list[Selection] | None = None,
                      rescale: str = "original"):
    """A new model without the heads `selections` drop (every other tensor copied bit for bit), loaded strictly.
    channels: per layer, the kept key heads' channels to keep as well (rescale: as build_pruned's), removed in the
    same build: their edits follow the head edits, laid out on the head-pruned architecture built on the meta
    device (no weights)."""
    adapter = adapter_for(model)
    layers = linear_layers(model)
    if len(selections) != len(layers):
        raise AnalysisError(f"Got {len(selections)} head selections for {len(layers)} linear-attention layers.")
    counts = [s.counts for s in selections]
    dims, readout = key_dims(model), adapter.readout_key_dims(model)
    names = {id(m): n for n, m in model.named_modules()}
    edits = {}
    for layer, sel in zip(layers, selections):
        prefix = names[id(layer.module)] + "."
        have = (layer.key_heads, layer.value_heads)
        by_param: dict[str, list] = defaultdict(list)
        for rows in adapter.head_rows(layer.module):
            by_param[rows.param].append(rows)
        norm = adapter.grouped_norm_weight(layer.module)
        scaled = norm if norm is not None and sel.counts != have else None
        for param in {*by_param, *([scaled] if scaled else [])}:
            edits[prefix + param] = partial(_without_heads, rows=by_param.get(param), have=have, sel=sel,
                                            scale=param == scaled)
    if channels:
        layout = _on_meta(model, lambda m: adapter.pruned_model(m, dims, readout, head_counts=counts))
        dims = [s.kept for s in channels]
        adapter.check_key_dims(dims, next(model.parameters()).device.type)  # e.g. KDA's GPU minimum
        readout = adapter.readout_key_dims(layout) if rescale == "original" else None
        for name, edit in channel_edits(layout, channels).items():
            edits[name] = partial(_then, edits[name], edit) if name in edits else edit
    return rebuilt(model, lambda m: adapter.pruned_model(m, dims, readout, head_counts=counts), edits)


def _then(first, second, tensor: torch.Tensor) -> torch.Tensor:
    return second(first(tensor))


def _on_meta(model, architecture):
    """`architecture` (an adapter's pruned model) of `model`, built on the meta device: its layout, no weights."""
    if is_streamed(model):
        source = model.skeleton.model
    else:
        with torch.device("meta"):
            source = type(model)(copy.deepcopy(model.config))
    with torch.device("meta"):
        return architecture(source)


def _without_heads(tensor: torch.Tensor, rows, have: tuple[int, int], sel: HeadSelection, scale: bool) -> torch.Tensor:
    """One tensor of a head-pruned layer: the dropped heads' blocks removed (rows: its HeadRows entries, if any);
    `scale`: the grouped norm's weight, scaled so the group's mean keeps its width (pure removal)."""
    if rows:
        tensor = drop_blocks(tensor, rows, have, sel.key_heads, sel.value_heads)
    if scale:
        ratio = (have[1] / have[0]) / (sel.counts[1] / sel.counts[0])
        tensor = (tensor.double() * math.sqrt(ratio)).to(tensor.dtype)
    return tensor


def choose_heads(model, plan: HeadPlan, calibration, seed: int = 0) -> list[HeadSelection]:
    from analysis.shrink.heads.strategies import get_head_strategy
    strategy = get_head_strategy(plan.strategy)
    if strategy.needs_calibration and calibration is None:
        raise AnalysisError(f"The {strategy.label} head strategy needs calibration data; run calibrate() first.")
    return [select_heads(s, n, layer.key_heads)
            for s, n, layer in zip(strategy.scores(model, calibration, seed), plan.counts, linear_layers(model))]


def prune_with_heads(model, strategy: str | None, dims: list[int], heads: HeadPlan, calibration=None, seed: int = 0,
                     rescale: str = "original") -> PruneResult:
    """Remove heads (and, where `dims` asks for it, key channels chosen by `strategy` on the original model):
    a new model; the result's info["heads"] says what was kept."""
    check_rescale(rescale)
    original_dims = key_dims(model)
    channels = None
    if dims != original_dims:
        if strategy is None:
            raise AnalysisError("Shrinking the key dim needs a channel strategy; give --strategy.")
        channels = choose_channels(model, strategy, dims, calibration, seed)   # on the original model
    chosen = choose_heads(model, heads, calibration, seed)
    kept = []
    if channels is not None:   # the kept key heads' channels, removed in the same build as the heads
        kept = [Selection(indices=None if s.indices is None else s.indices[h.key_heads],
                          projection=None if s.projection is None else s.projection[h.key_heads], details=s.details)
                for s, h in zip(channels, chosen)]
    pruned = build_head_pruned(model, chosen, kept, rescale)
    info = prune_info(pruned, get_strategy(strategy) if channels is not None else None, rescale, kept)
    return PruneResult(model=pruned, strategy=strategy or "none", dims=list(dims), original_dims=original_dims,
                       selections=kept, info={**info, "heads": head_info(model, heads, chosen)})


def head_info(model, plan: HeadPlan, chosen: list[HeadSelection]) -> dict:
    """What a head prune kept, for pruning.json and the CLI's JSON."""
    from analysis.shrink.heads.strategies import get_head_strategy
    adapter = adapter_for(model)
    return {"strategy": plan.strategy, "label": get_head_strategy(plan.strategy).label,
            "original_head_counts": [list(c) for c in original_head_counts(model, adapter)],
            "head_counts_before": [[l.key_heads, l.value_heads] for l in linear_layers(model)],
            "head_counts": [list(s.counts) for s in chosen],
            "kept_value_heads": [s.value_heads.tolist() for s in chosen],
            "kept_key_heads": [s.key_heads.tolist() for s in chosen]}
