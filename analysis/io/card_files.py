"""Where `python -m analysis card` may write README.md and card.json (design.md, "Your users' files").

Into the model's own directory only when it carries the tool's marker, and then only card files the
marker lists or new ones (recorded in it); never through a symbolic link (a Hugging Face cache snapshot is
all links into blobs/). Elsewhere: `--out DIR`, a new directory (created with its own marker) or one made
that way before. Every refusal is one sentence, given before the card is measured.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.io import writes

CARD_FILES = ("card.json", "README.md")
CARD_KIND = "model-card"
MAX_MARKER_BYTES = 1 << 20
HOW = "add --out DIR to write the card into a new directory instead"


def check_destination(model_dir, out=None) -> Path:
    """The directory the card goes to (model_dir, or out), or one sentence saying why not and how."""
    if out is None:
        folder = Path(model_dir)
        if marker_files(folder) is None:
            raise AnalysisError(f"{writes.show(folder)} was not written by this tool (no valid {writes.MARKER} "
                                f"marker), so its README.md and card.json are left alone; {HOW}.")
        _check_card_files(folder, marker_files(folder))
        return folder
    text = str(out)
    if not text.strip() or "\0" in text:
        raise AnalysisError("--out needs a plain directory path for the card.")
    folder = Path(os.path.abspath(os.path.expanduser(text)))
    if os.path.islink(folder):
        raise AnalysisError(f"--out {writes.show(folder)} is a symbolic link, which is never written through; "
                            "choose a new directory.")
    if os.path.lexists(folder):
        if not folder.is_dir():
            raise AnalysisError(f"--out {writes.show(folder)} is a file, not a directory; choose a new directory.")
        if marker_files(folder) is None:
            raise AnalysisError(f"--out {writes.show(folder)} already exists and was not written by this tool; "
                                "choose a new directory.")
        _check_card_files(folder, marker_files(folder))
    return folder


def write_card_files(folder: Path, texts: dict[str, str]) -> None:
    """Write the card files (checked by `check_destination`) and record them in the folder's marker."""
    created = not os.path.lexists(folder)
    with writes.os_errors("create the folder", folder):
        folder.mkdir(parents=True, exist_ok=True)
    if not created:  # again, just before writing: a link may have appeared while the card was measured
        _check_card_files(folder, marker_files(folder) or set())
    for name, text in texts.items():
        writes.write_text(folder / name, text, label="the model card")
    if created:
        record = {"written_by": writes.WRITER, "kind": CARD_KIND, "files": sorted(texts)}
        writes.write_text(folder / writes.MARKER, json.dumps(record, indent=2) + "\n", label="the model card")
    else:
        writes.record_written(folder, list(texts))  # the folder stays one this tool wrote, card included


def marker_files(folder: Path) -> set[str] | None:
    """The files the tool's marker in `folder` lists, or None when there is no valid marker (a link, a
    FIFO, a huge or foreign file is no marker)."""
    marker = folder / writes.MARKER
    try:
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MARKER_BYTES:
            return None
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            record = json.loads(fh.read(MAX_MARKER_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("written_by") != writes.WRITER:
        return None
    files = record.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return set(files)


def _check_card_files(folder: Path, listed: set[str]) -> None:
    for name in CARD_FILES:
        path = folder / name
        if os.path.islink(path):
            raise AnalysisError(f"{writes.show(path)} is a symbolic link (as in a Hugging Face cache snapshot), "
                                f"and the card is never written through one; {HOW}.")
        if os.path.lexists(path) and name not in listed:
            raise AnalysisError(f"{writes.show(path)} was not written by this tool and is left alone; {HOW}.")
        if os.path.lexists(path) and not path.is_file():
            raise AnalysisError(f"{writes.show(path)} is not a regular file and is left alone; {HOW}.")
