"""Removing whole heads from linear-attention layers: the half that does not depend on the family.

The adapter names every parameter block that belongs to one key head or one value head (`head_rows`) and the
layer's size attributes (`set_head_counts`); this module resizes the parameters and keeps the counts in the
config, so a head-pruned model builds and loads like any other pruned model:
- `linear_head_counts`: one [key heads, value heads] pair per linear-attention layer (a hybrid's softmax blocks
  have none), what the model has now;
- `original_head_counts`: the pairs of the unpruned model (a second prune keeps them).
The registered per-layer types (the family's own classes) build the model at the config's original sizes, then
`apply_head_counts` shrinks every named parameter to the kept counts (before any per-layer key dim is applied);
the weights are loaded afterwards. A family's own config never says per-layer head counts, so a head-pruned
model is always the registered type.

Pure removal. Key head h serves value heads h·G … h·G+G−1 (G = Hv/Hk); a kept key head keeps the same number of
value heads as every other (the kernels' grouping), and a key head goes when all its value heads go. Removing a
value head removes its v rows and conv channels, β / gate / decay rows, output-gate rows and o_proj input
columns; its state and output vanish and nothing else changes where every output norm is per head. Mamba-2
normalises the gated output over all value heads of a group (n entries) before out_proj; with the removed
heads' entries zero, x·rsqrt(Σx²/n + ε) = sqrt(n/n')·x·rsqrt(Σx²/n' + ε·n/n') over the n' kept entries, so the
pruned norm with eps ε·n/n' and weight scaled by sqrt(n/n') equals the original with those heads zeroed where
they enter the norm, exactly (adapter.grouped_norm_weight, set_head_counts).
"""
from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn as nn

HEAD_COUNTS_KEY = "linear_head_counts"
ORIGINAL_COUNTS_KEY = "original_head_counts"


def counts_of(layer, adapter) -> tuple[int, int]:
    return int(adapter.key_heads(layer)), int(adapter.value_heads(layer))


def saved_head_counts(config) -> list[tuple[int, int]] | None:
    """The per-linear-layer (key heads, value heads) a head-pruned config keeps; None for any other model."""
    counts = config.get(HEAD_COUNTS_KEY) if isinstance(config, dict) else getattr(config, HEAD_COUNTS_KEY, None)
    return None if counts is None else [(int(k), int(v)) for k, v in counts]


def original_head_counts(model, adapter) -> list[tuple[int, int]]:
    """What the unpruned model had per linear layer (the config's record after a head prune, else the layers)."""
    kept = getattr(model.config, ORIGINAL_COUNTS_KEY, None)
    if kept is not None:
        return [(int(k), int(v)) for k, v in kept]
    return [counts_of(layer, adapter) for layer in adapter.linear_layers(model)]


def head_config_fields(model, adapter, head_counts) -> dict:
    """Config fields of a pruned copy of `model`: its new head counts (or the ones it already has) and the
    unpruned model's; {} for a model whose heads were never pruned and are not being pruned now."""
    counts = head_counts if head_counts is not None else saved_head_counts(model.config)
    if counts is None:
        return {}
    return {HEAD_COUNTS_KEY: [[int(k), int(v)] for k, v in counts],
            ORIGINAL_COUNTS_KEY: [[k, v] for k, v in original_head_counts(model, adapter)]}


def apply_head_counts(model) -> None:
    """In a registered pruned type's __init__, before per-layer key dims: shrink each linear layer to its kept
    head counts (parameters empty; the weights are loaded afterwards)."""
    counts = saved_head_counts(model.config)
    if counts is None:
        return
    from analysis.archs import adapter_for
    adapter = adapter_for(model.config)
    layers = adapter.linear_layers(model)
    original = getattr(model.config, ORIGINAL_COUNTS_KEY, None) or [counts_of(l, adapter) for l in layers]
    if len(counts) != len(layers) or len(original) != len(layers):
        raise ValueError(f"{HEAD_COUNTS_KEY} has {len(counts)} entries for {len(layers)} linear-attention layers")
    for layer, (key_heads, value_heads), first in zip(layers, counts, original):
        if (key_heads, value_heads) != counts_of(layer, adapter):
            resize_heads(layer, adapter, key_heads, value_heads, (int(first[0]), int(first[1])))


def resize_heads(layer: nn.Module, adapter, key_heads: int, value_heads: int, original: tuple[int, int]) -> None:
    """Give every head-indexed parameter of `layer` the size of `key_heads` / `value_heads` heads (uninitialised
    values), then let the adapter update the layer's own size attributes."""
    have = counts_of(layer, adapter)
    removed: dict[tuple[str, int], int] = defaultdict(int)
    for rows in adapter.head_rows(layer):
        before, after = (have[0], key_heads) if rows.role == "key" else (have[1], value_heads)
        removed[(rows.param, rows.dim)] += (before - after) * rows.width
    for (path, dim), count in removed.items():
        resize_parameter(layer, path, dim, layer.get_parameter(path).shape[dim] - count)
    adapter.set_head_counts(layer, key_heads, value_heads, original)


def resize_parameter(layer: nn.Module, path: str, dim: int, size: int) -> None:
    """Replace one parameter by an empty one of `size` entries along `dim`, keeping the owning torch module's
    size attributes true (Linear features, a depthwise Conv1d's channels and groups, fla's hidden_size)."""
    owner_path, _, name = path.rpartition(".")
    owner = layer.get_submodule(owner_path) if owner_path else layer
    old = getattr(owner, name)
    shape = list(old.shape)
    shape[dim] = size
    new = nn.Parameter(torch.empty(shape, device=old.device, dtype=old.dtype), requires_grad=old.requires_grad)
    for flag in ("_no_weight_decay",):  # optimiser hints fla sets on decay parameters
        if hasattr(old, flag):
            setattr(new, flag, getattr(old, flag))
    setattr(owner, name, new)
    if name != "weight":
        return
    if isinstance(owner, nn.Linear):
        owner.out_features, owner.in_features = shape[0], shape[1]
    elif isinstance(owner, nn.Conv1d):   # depthwise: one group per channel
        owner.in_channels = owner.out_channels = owner.groups = shape[0]
        if hasattr(owner, "hidden_size"):
            owner.hidden_size = shape[0]


def drop_blocks(tensor: torch.Tensor, rows: list, have: tuple[int, int], kept_key, kept_value) -> torch.Tensor:
    """`tensor` without the blocks of the heads not kept (rows: the HeadRows entries naming this tensor, all on
    one dim); kept_key / kept_value: sorted indices of the kept key and value heads."""
    dim = rows[0].dim
    keep = torch.ones(tensor.shape[dim], dtype=torch.bool)
    for entry in rows:
        kept = set((kept_key if entry.role == "key" else kept_value).tolist())
        heads = have[0] if entry.role == "key" else have[1]
        if len(entry.starts) != heads:
            raise ValueError(f"{entry.param}: {len(entry.starts)} {entry.role}-head blocks for {heads} heads")
        for h, start in enumerate(entry.starts):
            if h not in kept:
                keep[start:start + entry.width] = False
    return tensor.index_select(dim, keep.nonzero().flatten().to(tensor.device)).contiguous()
