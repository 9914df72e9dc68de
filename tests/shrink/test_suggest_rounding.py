"""Suggest from rank under tile rounding: the page is told when rounding changes the suggestion, with both."""
import pytest

from analysis.shrink.suggest import suggest, suggest_ratios

ISSUE_PROFILE = [0.088, 0.061, 0.056, 0.062]  # deltanet-small's layers (issue 13, item 7)


def test_rounding_that_makes_the_suggestion_uniform_says_so_and_keeps_the_unrounded_one():
    s = suggest(ISSUE_PROFILE, 0.5, round_to=16, key_dims=[64] * 4)
    assert s.ratios == [0.5] * 4 and s.uniform and s.rounding_changed
    assert s.unrounded == suggest_ratios(ISSUE_PROFILE, 0.5, key_dims=[64] * 4)
    assert len(set(round(r, 3) for r in s.unrounded)) == 4
    note = s.note()
    assert "made the suggestion uniform (0.5 for every layer)" in note
    assert " / ".join(f"{r:.3f}" for r in s.unrounded) in note


def test_rounding_that_changes_but_keeps_a_shape_lists_both():
    s = suggest([0.9, 0.1], 0.5, round_to=16, key_dims=[128, 128])
    assert s.rounding_changed and not s.uniform
    assert "changed the suggestion to" in s.note()
    assert sum(s.ratios) / 2 == pytest.approx(0.5, abs=0.07)


def test_no_rounding_or_no_change_gives_no_note():
    assert suggest(ISSUE_PROFILE, 0.5, key_dims=[64] * 4).note() is None
    exact = suggest([0.25, 0.25], 0.5, round_to=16, key_dims=[64, 64])  # 32 kept each: already a multiple
    assert exact.ratios == [0.5, 0.5] and exact.note() is None
