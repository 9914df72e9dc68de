"""Give freed memory back to the system at once, so a streamed model's peak stays near one block.

glibc serves an allocation from its heap unless it is larger than a threshold (128 KiB at start), and raises that
threshold to the size of every large block freed (up to 32 MiB): after the first layer is released, the next
layer's tensors come from the heap and, once freed, stay counted in the process's resident memory (a streamed run
grew by a whole model's worth that way). Fixing the threshold keeps every allocation of 64 KiB or more in its own
mapping, returned to the system when freed. A no-op where glibc is not the allocator.
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3   # mallopt's parameter numbers (malloc.h)
THRESHOLD = 64 << 10
_done = False


def return_freed_memory() -> bool:
    """Set glibc's mmap threshold once (idempotent); False where it cannot be set."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _done = bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    except (OSError, AttributeError):
        return False
    return _done


def trim() -> bool:
    """Hand the heap's free pages back to the system (glibc's malloc_trim): after work that made many small
    allocations (a tokenizer's strings and id lists), which the mmap threshold does not cover; False where it cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False
