"""One interface for every channel-selection strategy.

A strategy scores the dk query/key channels of every head (higher = keep) and picks, for a budget of
k channels per head, the index set that slices q_proj/k_proj rows and q/k conv channels alike. PCA is
the exception that is not axis-aligned: it returns a per-head rotation instead of indices.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from analysis.calibration import Calibration
from analysis.models import attention_layers


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
    axis_aligned: bool = True
    needs_calibration: bool = True
    needs_gradients: bool = False

    def scores(self, model, calib: Calibration | None, seed: int = 0) -> list[torch.Tensor]:
        """Per layer, [H, dk] channel scores (for PCA: explained variance of each principal direction)."""
        raise NotImplementedError

    def select(self, model, calib: Calibration | None, dims: list[int], seed: int = 0) -> list[Selection]:
        """Per layer, the `dims[l]` channels of every head with the highest scores (sorted indices)."""
        return [Selection(indices=torch.topk(s, k, dim=-1).indices.sort(dim=-1).values)
                for s, k in zip(self.scores(model, calib, seed), dims)]


def head_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """[H·dk, hidden] projection weight → [H, dk, hidden]."""
    return weight.detach().float().reshape(heads, -1, weight.shape[-1])


def qk_weights(model):
    """Per layer (Wq, Wk) as [H, dk, hidden] fp32 copies."""
    return [(head_rows(a.q_proj.weight, a.num_heads), head_rows(a.k_proj.weight, a.num_heads))
            for a in attention_layers(model)]
