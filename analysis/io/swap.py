"""How the tool puts a folder it wrote in place: `publish` (a new name) and `replace` (an existing folder of its
own), their journal, and the reclaim of leftovers. The protocol is in `analysis.io.writes` ("Replacing a directory").

Why replacing a folder has two paths, and both stay (issue 43 asked whether one would do):
- `renameat2(RENAME_EXCHANGE)` swaps two names in one step, so NAME holds a whole folder at every instant, for a
  crash and for another process reading it alike. It is the only atomic way: POSIX rename cannot replace a
  non-empty directory. But it exists only on Linux, and only on file systems that implement it (not NFS, CIFS,
  vfat/exfat, older ZFS; not macOS), where it fails with EINVAL.
- There, the journal (two plain renames, with a record beside them written and fsynced first) is the one way to
  replace a folder at all: NAME is missing for the instant between the renames, and the record lets the next
  command finish or undo the swap after a crash, so nothing is lost or half-written (tests/io/test_faults.py kills
  it at every step). Keeping only the journal would give up the atomic step where the OS has it (a reader in that
  instant would find no model); keeping only the exchange would make every overwrite there (a training
  checkpoint, a Save with overwrite) fail. A journal left by an earlier run must still be finished, too.
Files never need either: `writes.write_text` replaces a file with one os.replace, which is atomic everywhere.
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

from analysis.io.marker import MARKER, TMP_FILE_SUFFIX, WRITER, marker_record, show

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


def publish(new: Path, target: Path) -> bool:
    """Give `new` the name `target`, which does not exist: one rename that never replaces (RENAME_NOREPLACE; where
    the OS lacks it, a check, then a rename). False, with nothing done, when `target` exists after all."""
    try:
        if not renameat2(new, target, RENAME_NOREPLACE):
            if os.path.lexists(target):
                return False
            os.rename(new, target)
    except FileExistsError:
        return False
    fsync_dir(target.parent)
    return True


def replace(new: Path, target: Path) -> None:
    """Put `new` in place of the folder `target` (the caller verified that the tool wrote it) and remove the old
    one: one RENAME_EXCHANGE, or the journal where the OS or file system lacks it (module doc)."""
    if renameat2(new, target, RENAME_EXCHANGE):
        fsync_dir(target.parent)
        remove_old(new)  # the old folder, now under the temporary name
    else:
        journal_swap(new, target)


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


def discard(folder: Path) -> None:
    """Remove a folder this tool wrote in one step: renamed aside to a leftover name first, so killed at any
    point the name is gone and what remains is a marked leftover the next write reclaims."""
    aside = folder.with_name(f".{folder.name[:64]}.replaced-{uuid.uuid4().hex[:8]}")
    os.rename(folder, aside)
    fsync_dir(folder.parent)
    remove_old(aside)


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
        raise OSError(errno.EBUSY, f"{journal.name} is in the way (another save of it in progress, or a file that is "
                      "not this tool's journal: remove it if it is not yours)", str(target)) from None
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
    elif marker_record(new) is not None and marker_record(new).get("state") != "partial":
        os.rename(new, target)
        done = "finished: the new one is in place"
    elif marker_record(old) is not None:
        os.rename(old, target)
        done = "rolled back: the old one is back"
    else:
        return None  # neither copy survives: nothing to finish, and nothing of ours to remove
    fsync_dir(parent)
    os.unlink(journal)
    return f"note: an interrupted replace of {show(target)} was {done}."


JOURNAL_BYTES = 65536


def _plain_name(name) -> bool:
    """A name inside the parent folder: not empty, not . or .., no separator or NUL."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _journal_target(name: str) -> str:
    return name[1:-len(JOURNAL_SUFFIX)]


def _open_journal(entry) -> int | None:
    """An fd on a journal that is a regular file, never following a link and never blocking (a FIFO named like
    a journal would otherwise hang every write into its folder); None when it is not one."""
    try:
        if not entry.is_file(follow_symlinks=False):
            return None
        return os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None


def _journal_record(text: str, target: str) -> dict | None:
    """The record of a journal this tool wrote for `target`, or None. Every name in it must be a plain name
    inside the folder, and `new`/`old` the tool's own temporaries, so no journal can point a rename at the
    folder itself (. or ..) or outside it."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    valid = isinstance(record, dict) and record.get("written_by") == WRITER and _plain_name(target) and \
        record.get("target") == target and all(_plain_name(record.get(k)) and _leftover_dir(record[k])
                                                 for k in ("new", "old"))
    return record if valid else None


def _torn(text: str) -> bool:
    """A journal killed while its first bytes were written (before any rename): ours, and safe to remove."""
    try:
        json.loads(text)
        return False  # whole: a journal, ours or not, is never removed for what it says
    except (ValueError, RecursionError):
        return _journal_head().startswith(text) or text.startswith(_journal_head())


def recover_journals(parent: Path, name: str | None = None) -> list[str]:
    """Finish or roll back every interrupted swap journalled in `parent` (only `name`'s when given). A journal
    that is not a regular file, not the tool's, or cannot be finished is named in one line and left alone: no
    journal can make a write or a load fail or hang."""
    lines = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(".") and e.name.endswith(JOURNAL_SUFFIX)]
    except OSError:
        return lines
    for entry in entries:
        target = _journal_target(entry.name)
        if name is not None and target != name:
            continue
        fd = _open_journal(entry)
        if fd is None:
            if os.path.lexists(entry.path):
                lines.append(f"note: skipped {show(entry.path)}: it is named like a swap journal but is not a "
                             "regular file; remove it if it is not yours.")
            continue
        try:
            if not lock(fd):
                continue  # a swap in progress in another process or thread
            text = os.read(fd, JOURNAL_BYTES).decode("utf-8", "replace")
            record = _journal_record(text, target)
            if record is None:
                if _torn(text):
                    os.unlink(entry.path)
                else:
                    lines.append(f"note: ignored {show(entry.path)}: it is not a swap journal this tool wrote for "
                                 "a folder here; remove it if it is not yours.")
                continue
            try:
                line = _finish(Path(entry.path), record)
            except OSError as exc:
                line = (f"note: the interrupted replace in {show(entry.path)} could not be finished "
                        f"({(exc.strerror or str(exc)).lower()}); it was left alone.")
            if line:
                lines.append(line)
        except OSError:
            continue
        finally:
            os.close(fd)
    return lines


# ---- leftovers ---------------------------------------------------------------------------------------

# the names this tool gives its temporary things (mkdtemp/mkstemp add 8 characters, uuid 8 hex digits)
_LEFTOVER_DIR = re.compile(r"\..+\.[a-z0-9_]{8}\.partial|\..+\.replaced-[0-9a-f]{8}|\.state-rank-probe-[a-z0-9_]{8}")
_LEFTOVER_FILE = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(TMP_FILE_SUFFIX))


def _leftover_dir(name: str) -> bool:
    return _LEFTOVER_DIR.fullmatch(name) is not None


def reclaimable(folder: Path) -> bool:
    """A hidden temporary/moved-aside directory of ours: it carries the marker (a half-written one: any
    content; a complete one: only the files it lists), or it holds nothing but a torn marker."""
    names = set(os.listdir(folder))
    record = marker_record(folder)
    if record is None:
        return names <= {MARKER}  # empty, or killed while the first marker was written
    if record.get("state") == "partial":
        return True
    listed = set(record.get("files") or []) | {MARKER}
    top = {Path(f).parts[0] for f in listed}
    return names <= top


def _journalled(entries) -> set[str]:
    """Names a valid journal still refers to (a swap in progress elsewhere): never reclaimed under its feet."""
    names = set()
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith(JOURNAL_SUFFIX):
            fd = _open_journal(entry)
            if fd is None:
                continue
            try:
                record = _journal_record(os.read(fd, JOURNAL_BYTES).decode("utf-8", "replace"),
                                         _journal_target(entry.name))
            except OSError:
                record = None
            finally:
                os.close(fd)
            if record is not None:
                names |= {record["new"], record["old"]}
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
