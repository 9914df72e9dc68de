"""One interface for every channel-selection strategy.

A strategy scores the dk query/key channels of every head (higher = keep) and picks, for a budget of
k channels per key head, the index set that slices every q/k row block the family's adapter names
(projections, short-convolution channels, per-channel decay rows) alike. PCA is
the exception that is not axis-aligned: it returns a per-head rotation instead of indices.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from analysis.shrink.calibration import Calibration
from analysis.models.forward import weights_of
from analysis.models.channel_group import qk_rows  # noqa: F401  (re-exported for the strategies)


@dataclass
class Selection:
    """What to keep in one layer: indices [H, k] (sorted) or, for PCA, a projection [H, k, dk]."""
    indices: torch.Tensor | None = None
    projection: torch.Tensor | None = None
    details: dict | None = None  # e.g. RRQR diagnostics per head

    @property
    def kept(self) -> int:
        return (self.indices if self.indices is not None else self.projection).shape[1]


class Strategy:
    name: str = ""
    label: str = ""
    description: str = ""
    axis_aligned: bool = True          # False: keeps rotated directions, not channels (no mask, no agreement)
    score_unit: str = "score"          # what one channel's score measures (a chart's y axis)
    needs_calibration: bool = True
    needs_gradients: bool = False

    def scores(self, model, calib: Calibration | None, seed: int = 0) -> list[torch.Tensor]:
        """Per layer, [H, dk] channel scores (for PCA: explained variance of each principal direction)."""
        raise NotImplementedError

    def select(self, model, calib: Calibration | None, dims: list[int], seed: int = 0) -> list[Selection]:
        """Per layer, the `dims[l]` channels of every head with the highest scores (sorted indices)."""
        return [Selection(indices=torch.topk(s, k, dim=-1).indices.sort(dim=-1).values)
                for s, k in zip(self.scores(model, calib, seed), dims)]


def qk_weights(model):
    """Per linear layer (Wq, Wk) as [Hk, dk, hidden] fp32 copies (the rows the adapter names), one layer at a
    time: a streamed model reads that layer's weights for it and releases them before the next one."""
    for layer, q, k in qk_rows(model):
        with weights_of(model, layer.module):
            pair = (layer.blocks(layer.module.get_parameter(q.param), q),
                    layer.blocks(layer.module.get_parameter(k.param), k))
        yield pair
