"""argparse types that check what a user typed, so a bad flag is one sentence before any work starts."""
from __future__ import annotations

import argparse
import math


def _number(text: str, integer: bool) -> float:
    value = float(text)  # "1e7" is a clear enough count; int("1e7") would reject it with a cryptic message
    if not math.isfinite(value) or (integer and value != int(value)):
        raise ValueError(text)
    return int(value) if integer else value


def _short(text: str, limit: int = 60) -> str:
    """What the user typed, cut in the middle when long: an error echoes it in one short sentence."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-(limit // 2):]}"


def whole(lo: int = 1, hi: int | None = None):
    """A whole number in [lo, hi] (hi inclusive, None for no upper bound)."""
    def parse(text: str) -> int:
        try:
            value = _number(text, integer=True)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {_short(text)!r}") from None
        if value < lo or (hi is not None and value > hi):
            span = f"≥ {lo}" if hi is None else f"between {lo} and {hi}"
            raise argparse.ArgumentTypeError(f"must be a whole number {span}, got {_short(text)}")
        return value
    parse.__name__ = "whole number"
    return parse


def real(lo: float | None = None, hi: float | None = None, hi_open: bool = False):
    """A finite number in [lo, hi] (or [lo, hi) with hi_open)."""
    def parse(text: str) -> float:
        try:
            value = _number(text, integer=False)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a finite number, got {_short(text)!r}") from None
        if (lo is not None and value < lo) or (hi is not None and (value >= hi if hi_open else value > hi)):
            raise argparse.ArgumentTypeError(f"must be {_span(lo, hi, hi_open)}, got {_short(text)}")
        return value
    parse.__name__ = "number"
    return parse


def _span(lo, hi, hi_open) -> str:
    if hi is None:
        return f"≥ {lo:g}"
    if lo is None:
        return f"{'<' if hi_open else '≤'} {hi:g}"
    return f"at least {lo:g} and {'below' if hi_open else 'at most'} {hi:g}"


def number_list(lo: float | None = None, hi: float | None = None, integer: bool = False, hi_open: bool = False):
    """Comma-separated numbers, each in range; at least one."""
    item = whole(int(lo), None if hi is None else int(hi)) if integer else real(lo, hi, hi_open)
    kind = "whole numbers" if integer else "numbers"

    def parse(text: str) -> list:
        parts = [p.strip() for p in str(text).split(",")]
        if not any(parts):
            raise argparse.ArgumentTypeError(f"needs at least one value (comma-separated {kind}), got {_short(text)!r}")
        if not all(parts):
            raise argparse.ArgumentTypeError(f"must be comma-separated {kind} without empty entries, got {_short(text)!r}")
        values = []
        for part in parts:
            try:
                values.append(item(part))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"each value {exc} (in {_short(text)!r})") from None
        return values
    parse.__name__ = "list"
    return parse


def memory_size(text: str) -> int:
    """A memory budget such as 4GiB or 500MiB, in bytes (analysis.models.budget.parse_size's sentence otherwise)."""
    from analysis.errors import AnalysisError
    from analysis.models.budget import parse_size
    try:
        return parse_size(text)
    except AnalysisError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--max-memory ").rstrip(".")) from None


memory_size.__name__ = "memory size"
