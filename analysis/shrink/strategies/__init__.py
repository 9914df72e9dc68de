"""Registry of channel-selection strategies: one interface (analysis.shrink.strategies.base.Strategy)."""
from __future__ import annotations

from analysis.errors import AnalysisError
from analysis.io.writes import show
from analysis.shrink.strategies.base import Selection, Strategy
from analysis.shrink.strategies.drrqr import DRRQRStrategy
from analysis.shrink.strategies.pca import PCAStrategy
from analysis.shrink.strategies.simple import GradientStrategy, L1Strategy, RandomStrategy, WandaStrategy

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    RandomStrategy(), L1Strategy(), WandaStrategy(), GradientStrategy(), PCAStrategy(), DRRQRStrategy())}


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise AnalysisError(f"Unknown strategy {show(str(name), 60)!r}; choose one of {', '.join(STRATEGIES)}.")
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "Selection", "Strategy", "get_strategy"]
