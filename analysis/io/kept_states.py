"""Hidden states kept on disk for a while: the unpruned streamed model's input of each decoder layer, per batch of
windows, which later points of the same set start from (analysis.models.stream.reuse).

Where: one private folder per set of points, `run-<random>` under `.prefix/` inside the point cache's folder
(`kept_root`). It holds a lock file (flocked while its process lives) and one safetensors file per (batch, layer), each
written atomically (a temporary name in the folder, then a rename: a reader never sees a torn file) and read back
without unpickling. The folder is removed when its owner is closed or collected, or at exit; one left by a killed
process (lock not held, nothing in it but this module's own files) is reclaimed by the next set that starts.

Bound: a set keeps at most half the disk space that was free when it started, less 1 GiB (`DISK_SHARE`,
`DISK_MARGIN`); a state that would pass it, or that meets a full disk, is not kept (`put` says False) and
whoever needed it recomputes it. Nothing here holds more memory than the one tensor being written or read.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path

import torch

DISK_SHARE = 0.5          # of the free disk space at the start, at most, per set of points
DISK_MARGIN = 1 << 30     # bytes always left free
LOCK_NAME = ".lock"
_OWN_FILE = re.compile(r"^(\.lock|b\d+-l\d+\.safetensors|\.b\d+-l\d+\..*\.tmp)$")


def kept_root() -> Path:
    """`<point cache>/.prefix`: inside the cache folder the user named (never beside it: a STATE_RANK_CACHE of
    their own must not grow a sibling); hidden, and the point cache's entries are its *.json files only. Read at call
    time: tests move the point cache."""
    from analysis.io import point_cache
    return Path(point_cache.CACHE_DIR) / ".prefix"


def _reclaim(root: Path) -> None:
    """Remove `run-*` folders of dead processes that hold nothing but this module's own files."""
    for folder in root.glob("run-*"):
        try:
            names = os.listdir(folder)
            if not folder.is_dir() or folder.is_symlink() or not all(_OWN_FILE.match(n) for n in names):
                continue
            fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live owner holds it: leave its folder alone
        except OSError:
            os.close(fd)
            continue
        os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)


def _remove(folder: Path, lock_fd: int) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.close(lock_fd)


class KeptStates:
    """Tensors kept per (batch, layer) in one private folder; see the module docstring. The folder is made at the
    first `put`, so a set whose states are never kept writes nothing."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else kept_root()
        self.folder: Path | None = None
        self.allowed = 0
        self.used = 0
        self.refused = None     # why nothing can be kept (the folder could not be made), or None
        self._finalizer = None

    def _open(self) -> bool:
        if self.folder is not None or self.refused is not None:
            return self.folder is not None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            _reclaim(self.root)
            folder = Path(tempfile.mkdtemp(dir=self.root, prefix="run-"))
            fd = os.open(folder / LOCK_NAME, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            free = shutil.disk_usage(folder).free
        except OSError as exc:
            self.refused = f"the cache area {self.root} cannot be written ({exc.strerror or exc})"
            return False
        self.folder, self.allowed = folder, max(int(free * DISK_SHARE) - DISK_MARGIN, 0)
        self._finalizer = weakref.finalize(self, _remove, folder, fd)  # also at exit
        return True

    def _path(self, batch: int, layer: int) -> Path:
        return self.folder / f"b{batch}-l{layer}.safetensors"

    def put(self, batch: int, layer: int, tensors: list[torch.Tensor]) -> bool:
        """Keep `tensors` as (batch, layer); False when they do not fit the bound or the disk (nothing kept)."""
        from safetensors.torch import save
        size = sum(t.numel() * t.element_size() for t in tensors)
        if not self._open() or self.used + size > self.allowed:
            return False
        data = save({str(j): t.detach().contiguous() for j, t in enumerate(tensors)})
        target = self._path(batch, layer)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{target.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                return False  # a full disk: not kept, recomputed by whoever needs it
            raise
        self.used += size
        return True

    def get(self, batch: int, layer: int) -> list[torch.Tensor] | None:
        """The tensors kept as (batch, layer), or None."""
        from safetensors.torch import load_file
        if self.folder is None:
            return None
        path = self._path(batch, layer)
        if not path.is_file():
            return None
        got = load_file(str(path))
        return [got[str(j)] for j in range(len(got))]

    def has(self, batch: int, layer: int) -> bool:
        return self.folder is not None and self._path(batch, layer).is_file()

    def close(self) -> None:
        """Remove the folder and everything in it (this set's own files only)."""
        if self._finalizer is not None:
            self._finalizer()
        self.folder, self.refused = None, "closed"  # `used` stays: what this set kept, for reports
