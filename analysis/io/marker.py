"""The names by which the tool recognises what it wrote (shared by `writes` and `swap`), and the kinds of
folder it writes: the marker says which, and no command replaces or deletes a folder of another kind."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

MARKER = ".state-rank-model.json"                      # in every directory the tool wrote: lists its files
WRITER = "state-rank (python -m analysis / the dashboard)"
TMP_FILE_SUFFIX = ".state-rank-tmp"                    # write_text's temporary files (reclaimed when a write was killed)

# The four kinds of folder the rules speak of. A marker names its folder's kind with one of the labels on the
# left (older markers without a kind are models); writes, replaces and deletes compare kinds, never labels.
MODEL, TRAINING_WORK, RECOVERY_STATE, CARD = "model", "training checkpoint", "recovery state", "model card"
_KINDS = {None: MODEL, "model": MODEL, "pruned model": MODEL, "trained model": MODEL,
          "training checkpoint": TRAINING_WORK, "recovery state": RECOVERY_STATE, "model-card": CARD, "model card": CARD}
# what a complete folder of each kind holds besides the marker (a folder missing them is not replaced)
REQUIRED = {MODEL: ("config.json", "*.safetensors"), TRAINING_WORK: ("config.json", "*.safetensors"),
            RECOVERY_STATE: ("recovery.json", "*.safetensors"), CARD: ("card.json",)}


def kind_of(label) -> str:
    """The kind a marker's label stands for (an unknown label is a kind of its own, equal to no other)."""
    return _KINDS.get(label, str(label))


def show(path, limit: int = 80) -> str:
    """A path short enough for one sentence (a 5,000-character name is cut in the middle)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-(limit // 2):]}"


MAX_MARKER_BYTES = 1 << 20


def marker_record(folder) -> dict | None:
    """The tool's marker in `folder` ({"written_by", "kind", "files", ...}), or None: absent, torn, foreign,
    huge, or not a regular file (a link or a FIFO is no marker, and is never opened in a way that could block)."""
    marker = Path(folder) / MARKER
    try:
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MARKER_BYTES:
            return None
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            record = json.loads(fh.read(MAX_MARKER_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("written_by") != WRITER:
        return None
    files = record.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return record
