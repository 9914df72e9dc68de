"""Hashable cache keys: what identifies a loaded model and a batch of inputs (plain strings and ints)."""
from __future__ import annotations

from typing import NamedTuple


class ModelKey(NamedTuple):
    """A resolved model: its directory and the concrete device/dtype (never 'auto', so aliases share a cache)."""
    path: str
    device: str   # "cpu" or "cuda"
    dtype: str    # "float32", "bfloat16", "float16"
    max_memory: int | None = None   # the sidebar's memory budget in bytes (None: half of the memory available)


class InputSpec(NamedTuple):
    """What the model reads: a bundled split, pasted text, or synthetic recall sequences."""
    kind: str          # "split" | "text" | "recall"
    split: str = "test"
    text: str = ""
    tokens: int = 256  # ignored for recall (the task fixes the length)
    sequences: int = 4
    seed: int = 0      # recall sequences only
