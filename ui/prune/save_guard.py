"""Save with Overwrite replaces only what the user saw (issue 25 defect 11).

Two sessions can show the same Save name; without this both would say "Saved to …" and the first would never
learn its model was replaced. Each page run records what the target folder held when it drew the Save form
(its marker's identity); a Save click compares that with the folder now and refuses in one sentence when
another save changed it since, asking to press Save again. Check and save run under one lock, so two sessions
of this server cannot both pass the check at the same instant.
"""
from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import streamlit as st

from analysis.errors import AnalysisError
from analysis.io import writes

_lock = threading.Lock()  # one Save at a time on this server: check-then-save is one step


def version(folder: Path | None) -> tuple | None:
    """Identity of what the folder holds now: its inode and its marker's inode, size and mtime (a save swaps in
    a new folder, so all change); None when there is nothing (or the name is invalid)."""
    if folder is None:
        return None
    try:
        top = os.lstat(folder)
    except OSError:
        return None
    try:
        marker = os.lstat(Path(folder) / writes.MARKER)
    except OSError:
        return top.st_ino, None
    return top.st_ino, marker.st_ino, marker.st_size, marker.st_mtime_ns


def target_of(text: str, local: bool) -> Path | None:
    try:
        return writes.output_target(text, local)
    except AnalysisError:
        return None  # the click says why, in one sentence


def shown(page: str, text: str, local: bool) -> tuple | None:
    """What the previous run of `page` showed for its Save target, and record what this run shows."""
    key = f"save_seen:{page}"
    before = st.session_state.get(key)
    folder = target_of(text, local)
    st.session_state[key] = (str(folder), version(folder))
    return before


def saved(page: str, folder: Path) -> None:
    """After this session's own save: the folder it shows now is the one it wrote."""
    st.session_state[f"save_seen:{page}"] = (str(folder), version(folder))


@contextlib.contextmanager
def unchanged(folder: Path, seen: tuple | None, overwrite: bool):
    """Hold the server's save lock; refuse (AnalysisError) when Overwrite would replace a folder that changed
    since the page showed it."""
    with _lock:
        now = version(folder)
        if overwrite and now is not None and seen is not None and seen[0] == str(folder) and seen[1] != now:
            raise AnalysisError(f"{folder} was saved again (by another session) since this page showed it; "
                                "press Save again to replace it.")
        yield
