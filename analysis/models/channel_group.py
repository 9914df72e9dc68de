"""One linear layer's channel group: the head-major indexing of its query/key channels, in one place.

The adapter declares where a layer's key channels live (`ChannelRows`: q and k projections, fused q|k|v slices,
per-head interleaved blocks, short-convolution channels, per-channel decay rows per value head, [heads, dk]
parameters); the group turns those declarations into row indices: which rows of each parameter one key channel
spans, so pruning, the strategies' weight reads and the query-noise hooks slice the same rows. It also says the
layer's sizes: key heads and value heads, dk, the kernel's state tiles and the fp32 recurrent state's bytes, the
one formula a plan's state bytes (a map row, the page's plan table) are computed with too (`fp32_state_bytes`).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, fields

import torch

from analysis.archs import adapter_for
from analysis.models.key_plan import kept_dim, tiles_of
from analysis.models.layers import LinearLayer, linear_layers

FP32_BYTES = 4  # fla keeps the recurrent state in fp32 whatever the model's dtype


def fp32_state_bytes(value_heads: int, key_dim: int, value_dim: int) -> int:
    """Bytes of one layer's recurrent state per sequence: one fp32 [dk, dv] matrix per value head."""
    return value_heads * key_dim * value_dim * FP32_BYTES


@dataclass(frozen=True)
class ChannelGroup(LinearLayer):
    """A linear layer (its sizes, as LinearLayer) and where its key channels are (the adapter's declarations)."""
    rows: tuple = ()      # ChannelRows, as adapter.channel_rows gives them (projections first, role q then k)

    @property
    def group_size(self) -> int:
        """Value heads per key head: key head h serves value heads h·G … h·G+G−1."""
        return self.value_heads // self.key_heads

    @property
    def tiles(self) -> int:
        return tiles_of(self.key_dim)

    def kept_dim(self, ratio: float, round_to: int | None = None) -> int:
        return kept_dim(self.key_dim, ratio, round_to)

    def state_bytes(self, key_dim: int | None = None) -> int:
        """fp32 recurrent-state bytes per sequence at `key_dim` channels per head (default: the layer's dk)."""
        return fp32_state_bytes(self.value_heads, self.key_dim if key_dim is None else key_dim, self.value_dim)

    def projection(self, role: str):
        """The ChannelRows of the query ("q") or key ("k") projection weight (not a convolution, not a bias)."""
        return next(r for r in self.rows if not r.conv and r.role == role and r.param.endswith("weight"))

    def heads_of(self, rows) -> int:
        """Head blocks `rows` holds: one per key head, or one per value head for decay ("gate") rows."""
        return self.value_heads if rows.role == "gate" else self.key_heads

    def head_starts(self, rows) -> list[int]:
        """First row of each head's dk-row block (heads packed dk apart unless the declaration says its stride)."""
        stride = rows.head_stride or self.key_dim
        return [rows.start + h * stride for h in range(self.heads_of(rows))]

    def head_index(self, rows, device=None) -> torch.Tensor:
        """[heads, dk] row indices of every key channel in `rows` (of a [heads, dk, ...] parameter: its first two
        dims flattened, see ChannelRows.heads_first)."""
        return torch.tensor(self.head_starts(rows), device=device)[:, None] + torch.arange(self.key_dim, device=device)

    def per_block(self, rows, chosen: torch.Tensor) -> torch.Tensor:
        """A per-key-head choice (indices [Hk, k] or a projection [Hk, k, dk]) for each head block of `rows`:
        decay rows are per value head, and value head j keeps the channels of key head j // G."""
        return chosen.repeat_interleave(self.group_size, dim=0) if rows.role == "gate" else chosen

    def blocks(self, tensor: torch.Tensor, rows) -> torch.Tensor:
        """The [heads, dk, ...] fp32 copy of the head blocks `rows` names inside `tensor`."""
        return tensor.detach().float()[self.head_index(rows, tensor.device)]


# model -> its groups, read once (a model's structure never changes after it is built; a prune makes a new model)
_GROUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def channel_groups(model) -> list[ChannelGroup]:
    """One group per linear-attention layer, in model order."""
    known = _GROUPS.get(model)
    if known is None:
        adapter = adapter_for(model)
        known = _GROUPS[model] = tuple(
            ChannelGroup(**{f.name: getattr(layer, f.name) for f in fields(LinearLayer)},
                         rows=tuple(adapter.channel_rows(layer.module))) for layer in linear_layers(model))
    return list(known)


def qk_rows(model) -> list[tuple]:
    """Per linear layer (its group, ChannelRows of the query projection, ChannelRows of the key projection)."""
    return [(group, group.projection("q"), group.projection("k")) for group in channel_groups(model)]
