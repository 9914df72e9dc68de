"""Issue 32: the low-/high-rank split of a layer's heads and its stability across inputs.

The split is the largest gap of the sorted head summaries; Cohen's κ is checked against hand-computed values; the
stability of a layer is the fraction of heads labelled alike on every text and the mean pairwise κ.
"""
from __future__ import annotations

import math

import pytest
import torch

from analysis.inspect.head_ranks import cohen_kappa, notice, split_groups, stability, trajectory_positions


def test_the_split_cuts_at_the_largest_gap():
    split = split_groups(torch.tensor([0.1, 3.0, 0.2, 2.9]))
    assert split["labels"] == ["low", "high", "low", "high"]
    assert split["gap"] == pytest.approx(2.7) and split["gap_ratio"] == pytest.approx(2.7 / 0.1)
    assert split_groups(torch.tensor([1.0, 2.0]))["gap_ratio"] is None          # two heads: no second gap
    assert split_groups(torch.tensor([1.0]))["labels"] == ["single"]


@pytest.mark.parametrize("a, b, kappa", [
    # p_o = 3/4, p_e = ½·¼ + ½·¾ = ½  →  κ = (¾ − ½)/(1 − ½)
    (["low", "high", "low", "high"], ["low", "high", "high", "high"], 0.5),
    # p_o = 3/5, p_e = (3/5)² + (2/5)² = 0.52  →  κ = 0.08/0.48
    (["low", "low", "high", "high", "low"], ["high", "low", "high", "low", "low"], 1 / 6),
    (["low", "high"], ["low", "high"], 1.0),
])
def test_kappa_by_hand(a, b, kappa):
    assert cohen_kappa(a, b) == pytest.approx(kappa)


def test_stability_of_three_texts():
    labels = [["low", "high", "high", "low"], ["low", "high", "high", "high"], ["low", "high", "high", "low"]]
    row = stability(labels)
    assert row["agreement"] == 0.75 and row["same_on_all"] == [True, True, True, False]
    # pairs (0,1) and (1,2): p_o = ¾, p_e = ½·¼ + ½·¾ = ½ → κ = ½; pair (0,2): identical → 1
    assert row["kappa"] == pytest.approx((0.5 + 1 + 0.5) / 3) and row["majority"] == ["low", "high", "high", "low"]


def test_the_notice_is_computed_from_the_numbers():
    splits = [split_groups(torch.tensor(v)) for v in ([0.1, 2.0, 2.1], [0.2, 2.2, 2.0], [0.0, 2.5, 2.4])]
    row = {"layer": 3, "splits": splits, **stability([s["labels"] for s in splits])}
    line = notice([row], 3)[0]
    assert line.startswith("layer 3: 1 of 3 heads low-rank and 2 high-rank on all 3 texts; clear split")
    assert f"×{math.exp(1.8):.2f}–×{math.exp(2.4):.2f}" in line and "agreement 100%, chance-corrected agreement a 1.00" in line


def test_positions_are_bounded_and_end_at_the_last_token():
    assert trajectory_positions(10) == list(range(10))
    many = trajectory_positions(1000)
    assert len(many) <= 65 and many[-1] == 999
