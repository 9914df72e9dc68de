"""The memory one request may hold beyond the process's baseline (`--max-memory`, the dashboard's sidebar field).

Torch-free, so the CLI can check a typed size before anything heavy is imported. The baseline is the process's
resident memory once the interpreter and the libraries are imported (`note_baseline()`, called at start-up);
a budget is what a request may add to it. Without a budget a request may use half of the memory available
now (`analysis.models.limits.MEMORY_FRACTION`), as before budgets existed.

The budget of the request being served lives in a context variable: the CLI sets it around its command
(`budget_scope`), the dashboard at each rerun of a session's script (`set_budget`) and inside each job's thread,
so two sessions with different budgets never mix.
"""
from __future__ import annotations

import contextlib
import contextvars
import re

from analysis.errors import AnalysisError

UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000 ** 2, "mb": 1000 ** 2, "g": 1000 ** 3, "gb": 1000 ** 3,
         "t": 1000 ** 4, "tb": 1000 ** 4, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
MIN_BUDGET = 1 << 20          # below 1 MiB nothing, not even one tiny block, can run
MAX_BUDGET = 1 << 50          # 1 PiB: a typo, not a machine
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*")

_budget: contextvars.ContextVar[int | None] = contextvars.ContextVar("memory_budget", default=None)
_baseline: dict = {}


def parse_size(text) -> int:
    """'4GiB', '500MiB', '3.5GB' or plain bytes '1048576' → bytes; one sentence otherwise."""
    match = _SIZE.fullmatch(str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in UNITS:
        raise AnalysisError(f"--max-memory {str(text)[:40]!r} is not a size; write a number and a unit, e.g. 4GiB, "
                            "500MiB or 3GB (KiB/MiB/GiB/TiB are powers of 1024, kB/MB/GB/TB of 1000).")
    size = int(float(match.group(1)) * UNITS[unit])
    if not MIN_BUDGET <= size <= MAX_BUDGET:
        raise AnalysisError(f"--max-memory {text} is {size_text(size)}; give a budget between 1 MiB and 1 PiB.")
    return size


def size_text(n: float) -> str:
    """Bytes in words with binary units (a budget reads as the user typed it: 4.0 GiB, 64.0 MiB)."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def current() -> int | None:
    """The budget of the request being served (bytes beyond the baseline), or None for the default share."""
    return _budget.get()


@contextlib.contextmanager
def budget_scope(size: int | None):
    """Serve the work inside with this budget (None: the default share of the available memory)."""
    token = _budget.set(size)
    try:
        yield
    finally:
        _budget.reset(token)


def set_budget(size: int | None) -> None:
    """For a dashboard rerun: the work of this script run has this budget (jobs carry it into their threads)."""
    _budget.set(size)


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def resident_bytes() -> int | None:
    """This process's resident memory now (VmRSS), None where /proc is not there."""
    return _status_kib("VmRSS")


def peak_resident_bytes() -> int | None:
    """This process's peak resident memory so far (VmHWM)."""
    return _status_kib("VmHWM")


def note_baseline() -> int | None:
    """Remember the resident memory of the interpreter and its imported libraries (once per process)."""
    if "rss" not in _baseline:
        _baseline["rss"] = resident_bytes()
    return _baseline["rss"]

