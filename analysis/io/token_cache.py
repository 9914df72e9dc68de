"""Token ids of a bundled split, kept on disk once encoded: the next process reads them instead of encoding again.

Encoding the 4.4 MB train split takes about 10 s on a laptop CPU and 40 s on a busy 2-core host; every process that
calibrates (Channel importance, Prune, Sweep, `prune`, `sweep`) needs it. An entry is one JSON file in CACHE_DIR
(`.cache/encoded/` of a checkout, `~/state-rank/cache/encoded/` installed, `STATE_RANK_ENCODED_CACHE` moves it;
written atomically by analysis.io.writes) named by what the ids depend on: the split
file's bytes, the tokenizer's content fingerprint and the encoder's own version. It holds the ids (int32,
base64) and their SHA-256; one that does not check out is ignored (and rewritten), never trusted. A folder that
cannot be written leaves the encoding uncached, nothing else changes.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import torch

from analysis.errors import AnalysisError
from analysis.io import writes

FORMAT = 1
# its own folder beside the point cache's default one (never inside a point cache: tests and pages count the entries
# there), shared by every process of this checkout or install; content-addressed and checked, so sharing is safe
CACHE_DIR = Path(os.environ.get("STATE_RANK_ENCODED_CACHE", writes.REPO_ROOT / ".cache" / "encoded" if writes.CHECKOUT
                                else writes.HOME_DIR / "cache" / "encoded"))
MAX_BYTES = 64 << 20  # an entry of the bundled train split is about 7 MB; anything far bigger is not ours


def entry_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps({**key, "format": FORMAT}, sort_keys=True).encode()).hexdigest()[:24]
    return CACHE_DIR / f"{digest}.json"


def lookup(key: dict) -> torch.Tensor | None:
    """The ids stored for `key`, or None (missing, unreadable, or not what the key says)."""
    path = entry_path(key)
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        entry = json.loads(path.read_text(encoding="utf-8"))
        raw = base64.b64decode(entry["ids"], validate=True)
        if entry.get("key") != {**key, "format": FORMAT} or hashlib.sha256(raw).hexdigest() != entry.get("sha256"):
            return None
        return torch.from_numpy(np.frombuffer(raw, dtype="<i4").astype(np.int64))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(key: dict, ids: torch.Tensor) -> None:
    """Keep `ids` for `key` when the folder can be written; otherwise nothing happens."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= 2**31):
        return
    raw = ids.to(torch.int32).numpy().astype("<i4").tobytes()
    text = json.dumps({"key": {**key, "format": FORMAT}, "sha256": hashlib.sha256(raw).hexdigest(),
                       "ids": base64.b64encode(raw).decode("ascii")})
    path = entry_path(key)
    with contextlib.suppress(OSError, AnalysisError):
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
            return  # not a file this tool wrote: left alone
        writes.write_text(path, text, label="the encoded-split cache")
