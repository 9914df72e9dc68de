"""The linear-attention layers of a model as its adapter sees them: heads and key/value dims (where the q/k rows
are: analysis.models.channel_group).

Below `models`, `limits`, `calibration` and the strategies (it asks only the adapter registry), so each of
them can read a model's geometry without importing the others.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from analysis.archs import adapter_for
from analysis.errors import AnalysisError


@dataclass(frozen=True)
class LinearLayer:
    """One linear-attention layer as the adapter sees it."""
    index: int            # among the linear layers (what per-layer ratios and key dims count)
    block: int            # position among all blocks
    module: object
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int


# model -> its linear layers, read once: a model's structure never changes after it is built (a prune makes a
# new model), so the adapter is asked once per model instead of on every call down a prune or a measurement.
_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def linear_layers(model) -> list[LinearLayer]:
    """Every linear-attention layer in model order (a hybrid's softmax blocks left out); one sentence when none."""
    known = _LAYERS.get(model)
    if known is None:
        known = _LAYERS[model] = tuple(_read_layers(model))
    return list(known)


def _read_layers(model) -> list[LinearLayer]:
    adapter = adapter_for(model)
    blocks = adapter.blocks(model)
    out = []
    for block in blocks:
        if block.kind == "linear":
            m = block.module
            out.append(LinearLayer(len(out), block.index, m, adapter.key_heads(m), adapter.value_heads(m),
                                   adapter.key_dim(m), adapter.value_dim(m)))
    if not out:
        raise AnalysisError(f"This {adapter.label} model has no linear-attention layer (its {len(blocks)} blocks are "
                            "all softmax attention or other mixers), so it has no recurrent state to analyse or "
                            "prune; pick a model with at least one linear-attention layer.")
    return out


def attention_layers(model) -> list:
    """The linear-attention modules, in order (kept name: the core hooks these)."""
    return [layer.module for layer in linear_layers(model)]

