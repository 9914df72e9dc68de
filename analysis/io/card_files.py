"""Where `python -m analysis card` may write README.md and card.json (docs/guarantees.md).

Into the model's own directory only when it carries the tool's marker, and then only card files the
marker lists or new ones (recorded in it); never through a symbolic link (a Hugging Face cache snapshot is
all links into blobs/), and into a bundled sample only with `--in-place` (the sample scripts' flag).
Elsewhere: `--out DIR`, a new directory or a card folder this tool wrote before, built as a marked
temporary folder and swapped in like a model (analysis.io.writes). Every refusal is one sentence, given
before the card is measured.
"""
from __future__ import annotations

import os
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.io import writes
from analysis.io.marker import marker_record

CARD_FILES = ("card.json", "README.md")
CARD_KIND = "model-card"  # the marker's label (analysis.io.marker.kind_of: a CARD folder)
HOW = "add --out DIR to write the card into a new directory instead"
OUT_HINT = "choose a new directory for the card"


def check_destination(model_dir, out=None, in_place: bool = False) -> Path:
    """The directory the card goes to (model_dir, or out), or one sentence saying why not and how."""
    if out is None:
        folder = Path(model_dir)
        if not in_place and _is_bundled(folder):
            raise AnalysisError(f"{writes.show(folder)} is a bundled sample, whose card only the sample scripts "
                                f"rewrite (with --in-place); {HOW}.")
        if marker_files(folder) is None:
            raise AnalysisError(f"{writes.show(folder)} was not written by this tool (no valid {writes.MARKER} "
                                f"marker), so its README.md and card.json are left alone; {HOW}.")
        _check_card_files(folder, marker_files(folder))
        return folder
    text = str(out)
    if not text.strip() or "\0" in text:
        raise AnalysisError("--out needs a plain directory path for the card.")
    return writes.check_new_dir(text, overwrite=True, exists_hint=OUT_HINT, kind=CARD_KIND)


def write_card_files(folder: Path, texts: dict[str, str], separate: bool) -> None:
    """Write the card files where `check_destination` said: `separate` (--out) as a whole new card folder
    swapped in in one step; otherwise into the model's directory, recorded in its marker."""
    if separate:
        def fill(tmp: Path) -> None:
            for name, text in texts.items():
                (tmp / name).write_text(text)
        writes.write_model_dir(folder, fill, overwrite=True, kind=CARD_KIND, exists_hint=OUT_HINT)
        return
    _check_card_files(folder, marker_files(folder) or set())  # again: a link may have appeared meanwhile
    for name, text in texts.items():
        writes.write_text(folder / name, text, label="the model card")
    writes.record_written(folder, list(texts))  # the folder stays one this tool wrote, card included


def marker_files(folder: Path) -> set[str] | None:
    """The files the tool's marker in `folder` lists, or None when there is no valid marker (a link, a
    FIFO, a huge or foreign file is no marker)."""
    record = marker_record(folder)
    return None if record is None else set(record["files"])


def _is_bundled(folder: Path) -> bool:
    real = Path(os.path.realpath(folder))
    samples = writes.SAMPLES_DIR.resolve()
    return real == samples or samples in real.parents


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

