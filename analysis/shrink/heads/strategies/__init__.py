"""Registry of head-selection strategies: one interface (analysis.shrink.heads.strategies.base.HeadStrategy)."""
from __future__ import annotations

from analysis.defaults import DEFAULT_HEAD_STRATEGY, HEAD_STRATEGY_NAMES
from analysis.errors import AnalysisError
from analysis.io.writes import show
from analysis.shrink.heads.strategies.base import HeadStrategy
from analysis.shrink.heads.strategies.measured import MeasuredStrategy
from analysis.shrink.heads.strategies.stats import NormStrategy, RandomHeadStrategy, RankNormStrategy, RankStrategy

HEAD_STRATEGIES: dict[str, HeadStrategy] = {s.name: s for s in (
    RankNormStrategy(), RankStrategy(), NormStrategy(), RandomHeadStrategy(), MeasuredStrategy())}
assert tuple(HEAD_STRATEGIES) == HEAD_STRATEGY_NAMES, "analysis.defaults lists the head strategies for --help"


def get_head_strategy(name: str) -> HeadStrategy:
    if name not in HEAD_STRATEGIES:
        raise AnalysisError(f"Unknown head strategy {show(str(name), 60)!r}; choose one of "
                            f"{', '.join(HEAD_STRATEGIES)}.")
    return HEAD_STRATEGIES[name]


__all__ = ["DEFAULT_HEAD_STRATEGY", "HEAD_STRATEGIES", "HeadStrategy", "get_head_strategy"]
