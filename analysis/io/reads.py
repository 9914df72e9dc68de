"""Reading a file a user named, the hostile-file way (issue 25, defect 6): regular files only (a FIFO
would hang the open, /dev/zero never ends), a size bound checked before reading, and JSON whose nesting
cannot leak a RecursionError. Every refusal is one sentence (AnalysisError).
"""
from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.io.writes import show

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def special(path) -> str | None:
    """What `path` (links followed) is when it exists but is neither a regular file nor a directory, else None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else kind_of(mode)


def check_regular(path, what: str, hint: str) -> None:
    """One sentence when an existing `path` is a FIFO, device or socket: "`what` X is not a regular file"."""
    found = special(path)
    if found:
        raise AnalysisError(f"{what} {show(path)} is not a regular file (it is {found}); {hint}.")


def read_bytes(path, limit: int, what: str, hint: str) -> bytes:
    """The whole file, at most `limit` bytes: refused before reading when it is not regular or larger."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO never blocks here
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):  # as open() would say: callers word their OSErrors already
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise AnalysisError(f"{what} {show(path)} is not a regular file (it is {kind_of(info.st_mode)}); {hint}.")
        if info.st_size > limit:
            raise AnalysisError(f"{what} {show(path)} is {info.st_size:,} bytes, more than the {limit:,} such a "
                                f"file can sensibly hold; {hint}.")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise AnalysisError(f"{what} {show(path)} grew past {limit:,} bytes while being read; {hint}.")
    return data


def loads(text, what: str, hint: str, object_hook=None):
    """json.loads, with absurd nesting (200,000 `[`) one sentence instead of a RecursionError.
    Other parse errors (ValueError) are left to the caller, which words them for its file."""
    try:
        return json.loads(text, object_hook=object_hook)
    except RecursionError:
        raise AnalysisError(f"{what} is nested too deeply to be real JSON; {hint}.") from None


def saved_folders(root, name: str, limit: int = 200) -> list[tuple[Path, int]]:
    """(folder, mtime in ns of folder/`name`) for the newest `limit` folders under `root` that the tool wrote (its
    marker is there) and that hold `name`; none when `root` cannot be listed."""
    from analysis.io.marker import MARKER
    found = []
    try:
        for p in Path(root).iterdir():
            if not p.is_symlink() and (p / MARKER).is_file() and (p / name).is_file():
                found.append((p, (p / name).stat().st_mtime_ns))
    except OSError:  # no output folder yet, or one removed while listing
        return found
    return sorted(found, key=lambda f: f[1], reverse=True)[:limit]


def json_object(path, max_bytes: int = 4 << 20) -> dict | None:
    """The JSON object in `path` (a regular file of at most `max_bytes`), or None when it is not one."""
    try:
        value = loads(read_bytes(path, max_bytes, Path(path).name, "skipped").decode("utf-8"), str(path), "skipped")
    except (OSError, ValueError, AnalysisError):
        return None
    return value if isinstance(value, dict) else None
