"""The names by which the tool recognises what it wrote (shared by `writes` and `swap`)."""
from __future__ import annotations

MARKER = ".state-rank-model.json"                      # in every directory the tool wrote: lists its files
WRITER = "state-rank (python -m analysis / the dashboard)"
TMP_FILE_SUFFIX = ".state-rank-tmp"                    # write_text's temporary files (reclaimed when a write was killed)


def show(path, limit: int = 80) -> str:
    """A path short enough for one sentence (a 5,000-character name is cut in the middle)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-(limit // 2):]}"
