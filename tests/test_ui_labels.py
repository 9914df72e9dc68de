"""Labels and chart details a lecturer found wrong (issue 23, item 5), on the pure ui/ builders."""
import math

import numpy as np
import pytest
import torch

from analysis import noise_report
from ui import noise_tables


def test_closed_form_table_follows_the_direction_picker():
    torch.manual_seed(0)
    S = torch.randn(3, 16, 8, dtype=torch.float64)  # full rank 8 in every sequence
    rows = noise_report.state_table(S, n_directions=8)
    table = noise_tables.closed_form_table(rows, [1, 4])
    gains = [c for c in table.columns if c.startswith("Σs²/s")]
    assert gains == ["Σs²/s₁²", "Σs²/s₄²"]
    s = torch.linalg.svdvals(S[0])  # independent reference: the SVD of sequence 0
    expected = float((s ** 2).sum() / s[3] ** 2)
    assert float(table.loc["sequence 0", "Σs²/s₄²"]) == pytest.approx(expected, rel=1e-3)  # 4 printed digits
    assert len(noise_tables.closed_form_table(rows).columns) == 4 + 8  # rank, ‖S‖², s₁, κ; None keeps every direction
