"""The CLI's JSON output: non-finite numbers become null (with a warning), files are written atomically.

Free of torch, so commands that load no model (`models`) stay fast.
"""
from __future__ import annotations

import json
import math
import sys

from analysis.io.writes import write_text


def finite_json(value, where: str = "$", bad: list | None = None):
    """A copy of `value` with every non-finite float (NaN, ±inf) replaced by None; `bad` collects where."""
    bad = [] if bad is None else bad
    if isinstance(value, float) and not math.isfinite(value):
        bad.append(where)
        return None
    if isinstance(value, dict):
        return {k: finite_json(v, f"{where}.{k}", bad) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v, f"{where}[{i}]", bad) for i, v in enumerate(value)]
    return value


def write_json(payload: dict, destination: str) -> None:
    """`-` prints to stdout; a path is written atomically through analysis.io.writes (symlinks written through,
    FIFOs and devices written to, normal permissions). NaN/inf become null, with a warning on stderr."""
    bad: list = []
    text = json.dumps(finite_json(payload, bad=bad), indent=2, allow_nan=False)
    if bad:
        shown = ", ".join(w.removeprefix("$.") for w in bad[:4]) + (", …" if len(bad) > 4 else "")
        print(f"warning: {len(bad)} value(s) are not finite (NaN or inf) and are written as null: {shown}",
              file=sys.stderr)
    if destination == "-":
        print(text)
        return
    write_text(destination, text + "\n")
