"""The one on-disk cache of computed points (sweep points and sensitivity-map points alike): each costs minutes,
so it outlives the process and is shared by the CLI and the dashboard (the dashboard's in-memory caches:
ui/shared/cache.py).

An entry is believed only if it proves itself (docs/guarantees.md): a regular file of sane
size (checked before a byte is read, opened without following links or waiting on a FIFO), JSON that
parses, a checksum that matches, its own key equal to the key asked for (model identity, code hash,
settings, point), and fields of the expected types that agree with the point. Anything else is one
one-line warning and the point is recomputed: never served, never a traceback, never a hang.

Entry file: {"format", "key", "result", "sha256"}, named by a digest of the key; sha256 covers key and result.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.io import writes
from analysis.io.point_identity import code_hash

FORMAT = 1
MAX_ENTRY_BYTES = 1 << 20   # a point is a few KiB; anything bigger is not an entry this tool wrote
CACHE_DIR = Path(os.environ.get("STATE_RANK_CACHE", writes.REPO_ROOT / ".cache" / "sweeps" if writes.CHECKOUT
                               else writes.HOME_DIR / "cache" / "sweeps"))
NUMBER, INT, TEXT, INT_LIST, OPTIONAL_INT, DICT = "number", "int", "text", "int list", "int or null", "mapping"
NUMBER_LIST = "number list"


class CacheWarning(UserWarning):
    """A cache entry that was not believed (it is recomputed)."""


def full_key(key: dict) -> dict:
    """The caller's key (model identity, settings, point) plus the hash of the code that computes points."""
    return {**key, "code": code_hash(), "format": FORMAT}


def entry_path(key: dict) -> Path:
    return CACHE_DIR / f"{hashlib.sha256(_canonical(full_key(key)).encode()).hexdigest()[:24]}.json"


def check_writable() -> None:
    """Fail in one sentence before any work when the cache directory cannot be written (a private,
    uniquely named empty probe folder, removed at once: nothing else in the folder is touched; one left by a
    kill in between is reclaimed by the next write there)."""
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(dir=CACHE_DIR, prefix=".state-rank-probe-"))
    except OSError as exc:
        raise AnalysisError(f"Cannot write the sweep cache in {CACHE_DIR} ({exc.strerror or exc}); set "
                            "STATE_RANK_CACHE to a writable directory.") from None


def lookup(key: dict, schema: dict, expect: dict | None = None) -> dict | None:
    """The cached result for `key`, marked cached, or None (missing, or not believed: one warning).

    schema: {field: type} every result must hold (NUMBER, INT, TEXT, INT_LIST, NUMBER_LIST, OPTIONAL_INT, DICT);
    expect: {field: value} the result must equal (the point it claims to be, e.g. strategy and ratio)."""
    path = entry_path(key)
    try:
        text = _read_entry(path)
        if text is None:
            return None
        result = _verify(text, json.loads(_canonical(full_key(key))), schema, expect or {})  # tuples → lists
    except _Untrusted as problem:
        warnings.warn_explicit(f"Cache entry {path.name} is not used: {problem}; recomputing that point.",
                               CacheWarning, "<point cache>", 0)  # "<…>": linecache never opens it
        return None
    return {**result, "cached": True}


def store(key: dict, result: dict) -> dict:
    """Write `result` as the entry for `key`; the result, marked not cached."""
    full = full_key(key)
    entry = {"format": FORMAT, "key": full, "result": result, "sha256": entry_checksum(full, result)}
    write_entry(entry_path(key), json.dumps(entry))
    return {**result, "cached": False}


def write_entry(path: Path, text: str) -> None:
    """The one place an entry reaches the disk: through the project's atomic writer. Something other than a
    regular file at the entry's name (a link, a FIFO, a folder: not written by this tool) is left alone and
    the point stays uncached (the lookup already warned); the writer would write into or through it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
            return
    except OSError as exc:
        raise AnalysisError(f"Cannot write the sweep cache in {path.parent} ({exc.strerror or exc}); set "
                            "STATE_RANK_CACHE to a writable directory.") from None
    writes.write_text(path, text, label="the sweep cache")


def cached(key: dict, use_cache: bool, compute, schema: dict, expect: dict | None = None) -> dict:
    """compute() once per key: a believed entry is served, anything else computed and stored."""
    hit = lookup(key, schema, expect) if use_cache else None
    return hit if hit is not None else store(key, compute())


# ---- reading and checking one entry -------------------------------------------------------------------

class _Untrusted(Exception):
    """Why an entry is not believed (the text of the one-line warning)."""


def _read_entry(path: Path) -> str | None:
    """The entry's text, None when there is none; refuses non-regular and oversized files before reading."""
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Untrusted(f"it cannot be examined: {exc.strerror or exc}") from None
    _check_kind(before)
    try:  # O_NOFOLLOW: a link swapped in meanwhile is refused; O_NONBLOCK: a FIFO never blocks the open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise _Untrusted("it is a symbolic link" if exc.errno == errno.ELOOP
                         else f"it cannot be opened: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        _check_kind(info)
        if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
            raise _Untrusted("it was replaced while being read")
        chunks, size = [], 0
        while size <= MAX_ENTRY_BYTES:  # never more than the bound, even if the file grows meanwhile
            chunk = os.read(fd, MAX_ENTRY_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise _Untrusted(f"it cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_ENTRY_BYTES:
        raise _Untrusted(f"it grew past {MAX_ENTRY_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Untrusted("it is not UTF-8 text") from None


def _check_kind(info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise _Untrusted("it is a symbolic link")
    if not stat.S_ISREG(info.st_mode):
        raise _Untrusted("it is not a regular file")
    if info.st_size > MAX_ENTRY_BYTES:
        raise _Untrusted(f"it is {info.st_size:,} bytes, more than an entry's {MAX_ENTRY_BYTES:,}")


def _verify(text: str, key: dict, schema: dict, expect: dict) -> dict:
    try:
        entry = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: deeply nested brackets
        raise _Untrusted("it is not valid JSON, so it is truncated or corrupt") from None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or not isinstance(entry.get("result"), dict):
        raise _Untrusted("it is not a cache entry of this version")
    if entry.get("key") != key:
        raise _Untrusted("it holds the result of another point or another model")
    if entry.get("sha256") != entry_checksum(entry["key"], entry["result"]):
        raise _Untrusted("its checksum does not match its content, so it was edited or damaged")
    result = entry["result"]
    for name, kind in schema.items():
        if name not in result:
            raise _Untrusted(f"it lacks {name!r}")
        if not _is(result[name], kind):
            raise _Untrusted(f"its {name!r} is not a {kind}")
    for name, value in expect.items():
        if result.get(name) != value:
            raise _Untrusted(f"its {name!r} is {_short(result.get(name))}, not {_short(value)}")
    return result


def _is(value, kind: str) -> bool:
    if kind == NUMBER:  # a non-finite perplexity is a real measurement (a ruined model); a bool is not a number
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == OPTIONAL_INT:
        return value is None or _is(value, INT)
    if kind == TEXT:
        return isinstance(value, str)
    if kind == DICT:
        return isinstance(value, dict)
    if kind == INT_LIST:
        return isinstance(value, list) and all(_is(v, INT) for v in value)
    if kind == NUMBER_LIST:
        return isinstance(value, list) and all(_is(v, NUMBER) for v in value)
    raise ValueError(f"unknown field kind {kind!r}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def entry_checksum(key, result) -> str:
    """sha256 of the canonical JSON of an entry's key and result."""
    return hashlib.sha256(_canonical({"key": key, "result": result}).encode()).hexdigest()
