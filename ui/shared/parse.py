"""Comma-separated number lists typed into a text box, checked with one clear sentence (AnalysisError)."""
from __future__ import annotations

from analysis.errors import AnalysisError


def number_list(text: str, what: str, lo: float, hi: float, integer: bool = False) -> list:
    """'0.25, 0.5' → [0.25, 0.5]; every value must lie in [lo, hi); duplicates dropped, order kept."""
    cast = int if integer else float
    try:
        values = [cast(part) for part in str(text).replace(";", ",").split(",") if part.strip()]
    except ValueError:
        kind = "whole numbers" if integer else "numbers"
        raise AnalysisError(f"The {what} must be comma-separated {kind}, got {text!r}.") from None
    if not values:
        raise AnalysisError(f"Give at least one value for the {what}.")
    bad = [v for v in values if not lo <= v < hi]
    if bad:
        span = f"between {lo} and {hi - 1}" if integer else f"at least {lo:g} and below {hi:g}"
        raise AnalysisError(f"The {what} must be {span}, got {bad[0]:g}.")
    return list(dict.fromkeys(values))
