"""Small reductions the pages need for plotting (pure numpy): NaN-aware mean and spread over sequences."""
from __future__ import annotations

import numpy as np


def mean_std(x, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std over `axis`, ignoring non-finite entries (NaN where nothing is finite)."""
    x = np.asarray(x, dtype=float)
    ok = np.isfinite(x)
    count = ok.sum(axis)
    safe = np.where(ok, x, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, safe.sum(axis) / np.maximum(count, 1), np.nan)
        dev = np.where(ok, x - np.expand_dims(mean, axis), 0.0)
        std = np.where(count > 0, np.sqrt((dev ** 2).sum(axis) / np.maximum(count, 1)), np.nan)
    return mean, std
