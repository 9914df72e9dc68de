"""Comparing a JSON document with a stored golden: ints/bools exact, floats within a stated tolerance.

Why a tolerance: floats that went through BLAS/LAPACK or vectorised reductions round differently on another
CPU (see tests/golden/test_migration_golden.py's docstring for the numbers measured on an AMD EPYC).
"""
from __future__ import annotations

import math
import re


def numbers(obj, path: str = "") -> dict:
    """{json path: value} for every number, bool and null of a JSON document (strings left out)."""
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in numbers(val, f"{path}.{key}").items()}
    if isinstance(obj, list):
        return {k: v for i, val in enumerate(obj) for k, v in numbers(val, f"{path}[{i}]").items()}
    return {} if isinstance(obj, str) else {path: obj}


REL_TOL = 1e-5     # floats: see the module docstring
SCALE_TOL = 1e-6   # x the largest magnitude among the floats of the same list
# A difference of two close numbers (Δ log-perplexity, relative Δ of perplexity) keeps the absolute error of
# what it subtracts (≤ 1e-6 on the AMD run: losses ≈ 4.6 nats at relative 1e-7), not its relative error, so
# it is compared absolutely; the numbers it is computed from are checked relatively where they are stored.
DIFFERENCES = {"loss", "delta_vs_unpruned", "recovered_delta_vs_unpruned"}
DIFF_TOL = 1e-5


def _group(path: str) -> str:
    """The list a number belongs to: its path with the innermost index dropped."""
    return re.sub(r"\[\d+\]$", "[]", path)


def _field(path: str) -> str:
    return re.sub(r"\[\d+\]", "", path).rsplit(".", 1)[-1]


def mismatches(expected: dict, got: dict) -> list:
    scale: dict = {}
    for key, value in expected.items():
        if isinstance(value, float):
            scale[_group(key)] = max(scale.get(_group(key), 0.0), abs(value))
    bad = []
    for key, want in expected.items():
        have = got[key]
        if isinstance(want, float) and isinstance(have, (int, float)) and not isinstance(have, bool):
            floor = DIFF_TOL if _field(key) in DIFFERENCES else SCALE_TOL * scale[_group(key)]
            ok = math.isclose(want, have, rel_tol=REL_TOL, abs_tol=floor)
        else:  # ints, bools, null: exact
            ok = type(want) is type(have) and want == have
        if not ok:
            bad.append((key, want, have))
    return bad


