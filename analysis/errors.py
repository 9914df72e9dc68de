"""The project's one exception type for bad input: its message is a single sentence a user can act on."""


class AnalysisError(Exception):
    """Bad input or an impossible request, worded as: what was wrong, and what to do instead."""
