"""Two results (JSON-like: dicts, lists, numbers, strings) compared as numbers: equal structure, floats within a
relative tolerance the caller states, everything else exactly."""
from __future__ import annotations

import math


def same(got, want, where: str = "", rel: float = 1e-6) -> None:
    """Equal structure; floats within `rel` (relative; 1e-12 absolute near zero), everything else exactly."""
    if isinstance(got, float) or isinstance(want, float):
        assert isinstance(got, (int, float)) and isinstance(want, (int, float)), where
        assert math.isclose(got, want, rel_tol=rel, abs_tol=1e-12), f"{where}: {got!r} vs {want!r}"
    elif isinstance(got, dict):
        assert isinstance(want, dict) and set(got) == set(want), f"{where}: keys {sorted(got)} vs {sorted(want)}"
        for k in got:
            same(got[k], want[k], f"{where}.{k}", rel)
    elif isinstance(got, (list, tuple)):
        assert isinstance(want, (list, tuple)) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for i, (a, b) in enumerate(zip(got, want)):
            same(a, b, f"{where}[{i}]", rel)
    else:
        assert got == want, f"{where}: {got!r} vs {want!r}"
