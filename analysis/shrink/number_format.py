"""Signed numbers as a user reads them: never "-0.0000" or "+0.0000" for a value that rounds to zero.

A loss that rounds to zero at the shown precision prints as "0.0000" when it is exactly zero and as
"< 0.00005" (its magnitude is below half the last digit) otherwise, so a sign the digits cannot carry is
never shown. Percentages the same way ("0.00%" / "< 0.005%").
"""
from __future__ import annotations

import math


def signed(x: float | None, digits: int = 4, missing: str = "—") -> str:
    """x with an explicit sign at `digits` decimals; a value that rounds to zero has no sign (see above)."""
    if x is None or not math.isfinite(x):
        return missing if x is None else str(x)
    if round(x, digits) == 0:
        return f"{0:.{digits}f}" if x == 0 else f"< {0.5 * 10 ** -digits:.{digits + 1}f}"
    return f"{x:+.{digits}f}"


def signed_percent(fraction: float | None, digits: int = 2, missing: str = "—") -> str:
    """A relative change (0.012 → "+1.20%"), signed the same way as `signed`."""
    if fraction is None or not math.isfinite(fraction):
        return missing if fraction is None else str(fraction)
    return signed(100 * fraction, digits, missing) + "%"


def nats_with_percent(loss: float | None, digits: int = 4) -> str:
    """A Δ log perplexity (nats/token) with its perplexity change beside it: "+0.0070 (+0.70%)"."""
    if loss is None:
        return "—"
    return f"{signed(loss, digits)} ({signed_percent(math.expm1(loss))})"
