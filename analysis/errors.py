"""The project's one exception type for bad input: its message is a single sentence a user can act on."""


class AnalysisError(Exception):
    """Bad input or an impossible request, worded as: what was wrong, and what to do instead."""


def count(n: int, noun: str) -> str:
    """'1 token', '2 tokens': counts in messages read as English."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
