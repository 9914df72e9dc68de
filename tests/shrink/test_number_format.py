"""Signed numbers as users read them (issue 40, item 7): no "-0.0000" or "+0.0000" anywhere."""
import math

import pytest

from analysis.shrink.number_format import nats_with_percent, signed, signed_percent


@pytest.mark.parametrize("x, want", [(0.0, "0.0000"), (-0.0, "0.0000"), (-0.00003, "< 0.00005"),
                                     (0.00004999, "< 0.00005"), (-0.00005001, "-0.0001"), (0.0098, "+0.0098"),
                                     (-0.0014, "-0.0014"), (None, "—")])
def test_signed_never_prints_a_signed_zero(x, want):
    assert signed(x) == want


def test_percent_and_nats_with_percent():
    assert signed_percent(-0.00001) == "< 0.005%" and signed_percent(0.0) == "0.00%"
    assert signed_percent(0.0123) == "+1.23%"
    assert nats_with_percent(0.007) == f"+0.0070 (+{100 * math.expm1(0.007):.2f}%)"
    assert nats_with_percent(-0.00001) == "< 0.00005 (< 0.005%)"
    assert signed(math.nan) == "nan"
