"""One interface for every head-selection strategy (the head-level twin of analysis.shrink.strategies).

A head strategy scores every value head of every linear layer (higher = keep); analysis.shrink.heads.prune turns
the scores into the heads a plan keeps (the kernels' grouping respected). Scores come from the same calibration
as the channel strategies (analysis.shrink.calibration: train-split windows, or a recall model's own sequences).
"""
from __future__ import annotations

import torch

from analysis.shrink.calibration import Calibration


class HeadStrategy:
    name: str = ""
    label: str = ""
    description: str = ""
    score_unit: str = "score"
    needs_calibration: bool = True

    def scores(self, model, calib: Calibration | None, seed: int = 0) -> list[torch.Tensor]:
        """Per linear layer, [Hv] value-head scores (higher = keep)."""
        raise NotImplementedError

    def check_memory(self, model, sequences: int, tokens: int, held: int = 0) -> None:
        """One sentence, before any work, when scoring on `sequences` × `tokens` calibration tokens would not fit
        the memory this request may hold; `held`: what the calibration keeps beside it (bytes)."""


def calibration_statistics(model, calib: Calibration) -> list[dict]:
    """Per layer, each value head's mean log effective rank and mean log ‖S‖_F over the second half of the
    calibration sequences (analysis.inspect.head_ranks), computed once per calibration."""
    if "head_ranks" not in calib.derived:
        from analysis.inspect.head_ranks import head_trajectories
        calib.derived["head_ranks"] = head_trajectories(model, calib.input_ids, held=calib.held_bytes())["layers"]
    return calib.derived["head_ranks"]


def standardised(x: torch.Tensor) -> torch.Tensor:
    """(x − mean) / std over one layer's heads (population std); all zeros when the heads are equal."""
    x = x.double()
    std = x.std(unbiased=False)
    return (x - x.mean()) / std if float(std) > 0 else torch.zeros_like(x)


def check_statistics_memory(model, sequences: int, tokens: int, held: int = 0) -> None:
    """check_memory of the strategies that read calibration_statistics."""
    from analysis.inspect.head_ranks import check_trajectories
    check_trajectories(model, sequences, tokens, held)
