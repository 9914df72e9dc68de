"""Where `python -m analysis report --out FILE` may write its HTML (docs/guarantees.md).

A new file in an existing folder, or a report this tool wrote before (its first bytes carry the tool's
generator stamp); never a directory, a link, a FIFO or device, or any other existing file. Checked before
the report is measured and again just before the atomic write.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.io import writes

STAMP_BYTES = 4096  # the generator stamp sits in <head>, well inside this


def is_own_report(path: Path, stamp: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            return stat.S_ISREG(os.fstat(fh.fileno()).st_mode) and stamp.encode() in fh.read(STAMP_BYTES)
    except OSError:
        return False


def check_destination(out, stamp: str, label: str = "--out") -> Path:
    """The absolute path to write, or one sentence saying what is wrong and what to do."""
    text = "" if out is None else str(out)
    if not text.strip():
        raise AnalysisError(f"{label} needs a file path for the report, e.g. report.html.")
    if text.strip() == "-":
        raise AnalysisError(f"{label} - would mean stdout, but the report is a file to open in a browser; "
                            "give a path such as report.html.")
    if "\0" in text:
        raise AnalysisError(f"{label} contains a NUL character; type a plain file path.")
    path = Path(os.path.abspath(os.path.expanduser(text)))
    shown = writes.show(path)
    if os.path.islink(path):
        raise AnalysisError(f"{label} {shown} is a symbolic link, which is never written through; "
                            "give a new file path.")
    if path.is_dir():
        raise AnalysisError(f"{label} {shown} is a directory; give a file path inside it, e.g. {shown}/report.html.")
    if not path.parent.is_dir():
        raise AnalysisError(f"{label} {shown} cannot be written: the folder {writes.show(path.parent)} does not "
                            "exist; create it first or choose another path.")
    if os.path.lexists(path):
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise AnalysisError(f"{label} {shown} exists and is not a regular file; give a new file path.")
        if not is_own_report(path, stamp):
            raise AnalysisError(f"{label} {shown} already exists and is not a report this tool wrote, so it is "
                                "left alone; choose a new file name or remove it yourself.")
    writes.check_name_characters(path.name, "report file's name")
    writes.check_file_destination(path, label)  # length limits, and a probe that the folder takes new files
    return path


def write_report(out, html_text: str, stamp: str, label: str = "--out") -> Path:
    """Write the report atomically (temporary file + rename) after checking the destination once more."""
    path = check_destination(out, stamp, label)
    return writes.write_text(path, html_text, label=label)
