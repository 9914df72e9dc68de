"""The one-step directory swap behind `writes.write_model_dir`, its journal fallback, and leftover reclaim.

See the "Replacing a directory" section of `analysis.io.writes` for the protocol; this module holds the
mechanics: renameat2 through ctypes, the journal, the marker-last removal, and the scan of a parent folder
that finishes or rolls back interrupted swaps and removes leftovers that carry the tool's marker.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import re
import shutil
import sys
import uuid
from pathlib import Path

from analysis.io.marker import MARKER, TMP_FILE_SUFFIX, WRITER, show

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
AT_FDCWD = -100
_SYSCALL = {"x86_64": 316, "aarch64": 276}  # SYS_renameat2 where glibc is too old to export renameat2()
JOURNAL_SUFFIX = ".state-rank-swap.json"
FORCE_JOURNAL = False  # tests set this to take the journal path even where RENAME_EXCHANGE works
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP)


def _libc_call():
    """A callable (flags-taking renameat2) from libc, or None off Linux / without it."""
    if sys.platform != "linux":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "renameat2"):
        fn = libc.renameat2
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        return fn
    number = _SYSCALL.get(platform.machine())
    if number is None:
        return None
    syscall = libc.syscall
    return lambda *args: syscall(ctypes.c_long(number), *[ctypes.c_long(a) if isinstance(a, int) else a
                                                          for a in args])


_RENAMEAT2 = _libc_call()


def renameat2(src, dst, flags: int) -> bool:
    """rename with RENAME_NOREPLACE / RENAME_EXCHANGE; False (nothing done) where the OS or file system lacks it."""
    if FORCE_JOURNAL or _RENAMEAT2 is None:
        return False
    sys.audit("analysis.io.renameat2", str(src), str(dst), flags)  # a step the fault-injection suite can count
    if _RENAMEAT2(AT_FDCWD, os.fsencode(str(src)), AT_FDCWD, os.fsencode(str(dst)), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(src), None, str(dst))


def lock(fd: int) -> bool:
    """An exclusive flock on fd without waiting: False while another writer (process or thread) holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def locked_dir(path: Path) -> int:
    """An fd on the directory, holding its flock for as long as the fd is open (released if the process dies)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_marked(folder: Path) -> None:
    """Remove a directory this tool wrote, its marker last: killed half-way, what remains still carries it."""
    marker = folder / MARKER
    for entry in os.scandir(folder):
        if entry.name == MARKER:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    if os.path.lexists(marker):
        os.unlink(marker)
    os.rmdir(folder)


def remove_old(folder: Path) -> None:
    """The replaced model, once the new one is in place: a failure here leaves a marked leftover, not an error."""
    try:
        remove_marked(folder)
    except OSError:
        pass  # reclaimed by the next write into this folder


# ---- the journal (where RENAME_EXCHANGE is unavailable) -------------------------------------------------

def journal_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{JOURNAL_SUFFIX}")


def _journal_head() -> str:
    return json.dumps({"written_by": WRITER})[:-1]  # every journal starts with these bytes


def journal_swap(new: Path, target: Path) -> None:
    """Replace `target` by `new` with two renames, a journal beside them saying how to finish or undo them."""
    journal = journal_path(target)
    aside = target.with_name(f".{target.name[:64]}.replaced-{uuid.uuid4().hex[:8]}")
    record = json.dumps({"written_by": WRITER, "target": target.name, "new": new.name, "old": aside.name})
    try:
        fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise OSError(errno.EBUSY, "another save of this folder is in progress", str(target)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a live swap: recover() leaves it alone
        os.write(fd, record.encode())
        os.fsync(fd)
        fsync_dir(target.parent)
        os.rename(target, aside)
        try:
            os.rename(new, target)
        except BaseException:
            os.rename(aside, target)
            raise
        fsync_dir(target.parent)
        os.unlink(journal)  # decided: from here the old one is an ordinary marked leftover
    finally:
        os.close(fd)
    remove_old(aside)


def _finish(journal: Path, record: dict) -> str | None:
    """Finish or roll back the swap a journal describes; a line saying which (None: nothing was decided)."""
    parent = journal.parent
    target, new, old = (parent / record[k] for k in ("target", "new", "old"))
    if os.path.lexists(target):
        done = "finished: the new one is in place" if not os.path.lexists(new) else "rolled back: the old one is kept"
    elif marker_of(new) is not None and marker_of(new).get("state") != "partial":
        os.rename(new, target)
        done = "finished: the new one is in place"
    elif marker_of(old) is not None:
        os.rename(old, target)
        done = "rolled back: the old one is back"
    else:
        return None  # neither copy survives: nothing to finish, and nothing of ours to remove
    fsync_dir(parent)
    os.unlink(journal)
    return f"note: an interrupted replace of {show(target)} was {done}."


def recover_journals(parent: Path, name: str | None = None) -> list[str]:
    """Finish or roll back every interrupted swap journalled in `parent` (only `name`'s when given)."""
    lines = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(".") and e.name.endswith(JOURNAL_SUFFIX)]
    except OSError:
        return lines
    for entry in entries:
        target = entry.name[1:-len(JOURNAL_SUFFIX)]
        if name is not None and target != name or not entry.is_file(follow_symlinks=False):
            continue
        fd = os.open(entry.path, os.O_RDONLY)
        try:
            if not lock(fd):
                continue  # a swap in progress in another process or thread
            text = os.read(fd, 65536).decode("utf-8", "replace")
            try:
                record = json.loads(text)
                valid = record.get("written_by") == WRITER and record.get("target") == target and all(
                    isinstance(record.get(k), str) and record[k].startswith(".") and "/" not in record[k]
                    for k in ("new", "old"))
            except ValueError:
                valid = False
                if _journal_head().startswith(text) or text.startswith(_journal_head()):  # torn: before any rename
                    os.unlink(entry.path)
                continue
            if valid:
                line = _finish(Path(entry.path), record)
                if line:
                    lines.append(line)
        finally:
            os.close(fd)
    return lines


# ---- leftovers ---------------------------------------------------------------------------------------

def marker_of(folder: Path) -> dict | None:
    """The tool's marker record in `folder`, or None (absent, torn, or not ours)."""
    try:
        record = json.loads((folder / MARKER).read_text())
        return record if isinstance(record, dict) and record.get("written_by") == WRITER else None
    except (OSError, ValueError):
        return None


# the names this tool gives its temporary things (mkdtemp/mkstemp add 8 characters, uuid 8 hex digits)
_LEFTOVER_DIR = re.compile(r"\..+\.[a-z0-9_]{8}\.partial|\..+\.replaced-[0-9a-f]{8}|\.state-rank-probe-[a-z0-9_]{8}")
_LEFTOVER_FILE = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(TMP_FILE_SUFFIX))


def _leftover_dir(name: str) -> bool:
    return _LEFTOVER_DIR.fullmatch(name) is not None


def reclaimable(folder: Path) -> bool:
    """A hidden temporary/moved-aside directory of ours: it carries the marker (a half-written one: any
    content; a complete one: only the files it lists), or it holds nothing but a torn marker."""
    names = set(os.listdir(folder))
    record = marker_of(folder)
    if record is None:
        return names <= {MARKER}  # empty, or killed while the first marker was written
    if record.get("state") == "partial":
        return True
    listed = set(record.get("files") or []) | {MARKER}
    top = {Path(f).parts[0] for f in listed}
    return names <= top


def _journalled(entries) -> set[str]:
    """Names a journal still refers to (a swap in progress elsewhere): never reclaimed under its feet."""
    names = set()
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith(JOURNAL_SUFFIX):
            try:
                record = json.loads(Path(entry.path).read_text())
                names |= {record["new"], record["old"]}
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return names


def reclaim(parent: Path, keep: set[str] = frozenset()) -> list[str]:
    """Remove the leftovers of interrupted writes in `parent` (never one in use, never one without the mark)."""
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    keep = set(keep) | _journalled(entries)
    for entry in entries:
        if entry.name in keep:
            continue
        try:
            if entry.is_dir(follow_symlinks=False) and _leftover_dir(entry.name):
                fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    if lock(fd) and reclaimable(Path(entry.path)):
                        remove_marked(Path(entry.path))
                        removed.append(entry.name)
                finally:
                    os.close(fd)
            elif _LEFTOVER_FILE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                fd = os.open(entry.path, os.O_RDONLY)
                try:
                    if lock(fd):
                        os.unlink(entry.path)
                        removed.append(entry.name)
                finally:
                    os.close(fd)
        except OSError:
            continue  # gone meanwhile, or not ours to read: leave it
    return removed


def tidy(parent: Path, keep: set[str] = frozenset()) -> None:
    """Before a write into `parent`: finish interrupted swaps, remove leftovers, and say so on stderr."""
    parent = Path(parent)
    if not parent.is_dir():
        return
    for line in recover_journals(parent):
        print(line, file=sys.stderr)
    removed = reclaim(parent, keep)
    if removed:
        shown = ", ".join(show(n, 40) for n in removed[:3]) + (", …" if len(removed) > 3 else "")
        print(f"note: removed {len(removed)} leftover(s) of interrupted saves in {show(parent)} ({shown}).",
              file=sys.stderr)


def recover_target(path) -> None:
    """Cheap check before reading `path` (e.g. loading a model): finish its interrupted swap, if any."""
    try:
        path = Path(os.path.abspath(os.path.expanduser(str(path))))
        pending = os.path.lexists(journal_path(path))
    except (ValueError, OSError):  # a NUL or an unreadable folder: the caller's own checks say so
        return
    if pending:
        for line in recover_journals(path.parent, path.name):
            print(line, file=sys.stderr)
