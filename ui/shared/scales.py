"""Colour scales for the layer × head heatmaps: the data's range, or the metric's full possible range.

An auto-ranged scale makes 0.016 vs 0.019 look as different as 0 vs 1; the full range shows how far a
value is from its bounds: 0–1 for rank utilization, 0–m for the ranks (m = min(dk, dv)), up to 1/τ for
the condition number at the numerical rank (κ_τ ≤ 1/τ by construction). Pure: no streamlit.
"""
from __future__ import annotations

import numpy as np

TAU = 1e-3  # numerical-rank threshold the dashboard collects its metrics with (s_i > τ·s1)
DATA, FULL = "data", "full"
CHOICES = (DATA, FULL)
RANKS = {"stable_rank", "effective_rank", "participation_ratio", "numerical_rank", "energy_rank"}


def full_range(metric: str, max_rank: int, tau: float = TAU) -> tuple[float, float] | None:
    """The metric's possible range, or None for the norms (no upper bound: use the data, from 0)."""
    if metric == "rank_utilization":
        return 0.0, 1.0
    if metric in RANKS:
        return 0.0, float(max_rank)
    if metric == "condition_number":
        return 0.0, 1.0 / tau
    return None


def choice_label(choice: str, metric: str, max_rank: int, tau: float = TAU, compare: bool = False) -> str:
    if choice == DATA:
        return "data range (shared)" if compare else "data range"
    bounds = full_range(metric, max_rank, tau)
    if bounds is None:
        return "from 0"
    if metric == "condition_number":
        return f"fixed 0–1/τ = {bounds[1]:g}"
    return f"fixed {bounds[0]:g}–{bounds[1]:g}"


def colour_range(choice: str, metric: str, maps: list, max_rank: int, tau: float = TAU
                 ) -> tuple[float, float] | None:
    """zrange for the heatmaps: None (each map its own range) for one map on the data range; else one range."""
    values = np.concatenate([np.asarray(m, dtype=float).ravel() for m in maps])
    finite = values[np.isfinite(values)]
    if choice == FULL:
        bounds = full_range(metric, max_rank, tau)
        if bounds is not None:
            return bounds
        return (0.0, float(finite.max())) if finite.size and finite.max() > 0 else None
    if len(maps) > 1 and finite.size:  # two maps compared by colour share one range
        return float(finite.min()), float(finite.max())
    return None


def tau_note(metric: str, tau: float = TAU) -> str:
    """Title suffix stating τ where a metric depends on it (κ sits at 1/τ when a state's rank is cut by τ)."""
    if metric == "condition_number":
        return f" (τ = {tau:g}: κ ≤ 1/τ = {1 / tau:g})"
    if metric == "numerical_rank":
        return f" (τ = {tau:g})"
    return ""


def band_bounds(metric: str, tau: float = TAU) -> tuple[float | None, float | None]:
    """The range a metric's ±1 std band may cover: κ_τ in [1, 1/τ], utilization in [0, 1], ranks and norms ≥ 0."""
    if metric == "condition_number":
        return 1.0, 1.0 / tau
    if metric == "rank_utilization":
        return 0.0, 1.0
    return 0.0, None
