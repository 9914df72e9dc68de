"""Which key channels a pruning strategy keeps in one key head of one layer (the State lab's "what if dk were
smaller"), planned as the Prune page plans them (analysis.models.key_plan)."""
from __future__ import annotations

import torch

from analysis.errors import AnalysisError
from analysis.models.key_plan import plan_key_dims
from analysis.shrink.prune import strategy_problem
from analysis.shrink.strategies import get_strategy


def head_channels(model, strategy: str, ratio: float, layer: int, key_head: int, calibration=None,
                   seed: int = 0) -> torch.Tensor:
    """Indices [dk′] (axis-aligned) or a projection [dk′, dk] (PCA) for one key head of one layer."""
    strat = get_strategy(strategy)
    problem = strategy_problem(model, strat)
    if problem is not None:
        raise AnalysisError(problem)
    if strat.needs_calibration and calibration is None:
        raise AnalysisError(f"The {strat.label} strategy needs calibration data; pick random or l1, or calibrate "
                            "first.")
    dims = plan_key_dims(model, ratio=ratio)
    sel = strat.select(model, calibration, dims, seed=seed)[layer]
    return sel.indices[key_head] if sel.indices is not None else sel.projection[key_head]
