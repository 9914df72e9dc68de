"""Issue 20: the one-house redesign changes no number the CLI prints for the bundled samples.

`tests/golden/deltanet-small--sweep.json` and `gated-deltanet-small--sensitivity.json` were written by the code
before the redesign (commit 7ae80c1, the last one before issue 20's work) with exactly the commands below;
`tests/golden/test_migration_golden.py` covers rank, importance and prune the same way. Numbers are compared as
there: ints and bools exactly, floats within relative 1e-5 (they go through BLAS and vectorised reductions,
which round differently on another CPU; see that module's docstring). Timings are left out (`--no-latency`),
and so is recovery (optimizer steps would carry last-bit differences into later steps; recovery has its own
tests). The cache is bypassed, so every number is computed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.cli.main import main
from golden_compare import mismatches, numbers

GOLDEN = Path(__file__).resolve().parent
CALIB = ["--calib-sequences", "2", "--calib-tokens", "64"]
CASES = {
    "deltanet-small--sweep": ["sweep", "deltanet-small", "--strategies", "l1,wanda,drrqr", "--ratios", "0.25,0.5",
                              "--eval-tokens", "512", "--no-latency", "--no-cache", *CALIB],
    "gated-deltanet-small--sensitivity": ["sensitivity", "gated-deltanet-small", "--strategy", "wanda", "--ratios",
                                          "0.5", "--eval-tokens", "512", "--no-cache", *CALIB],
}


@pytest.mark.golden
@pytest.mark.parametrize("name", list(CASES))
def test_cli_numbers_are_those_of_the_code_before_the_redesign(name, tmp_path, monkeypatch):
    monkeypatch.setenv("STATE_RANK_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    assert main([*CASES[name], "--device", "cpu", "--quiet", "--json", str(out)]) == 0
    expected, got = numbers(json.loads((GOLDEN / f"{name}.json").read_text())), numbers(json.loads(out.read_text()))
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{len(missing)} numbers gone, e.g. {missing[:5]}"
    changed = mismatches(expected, got)
    assert not changed, f"{len(changed)} of {len(expected)} numbers changed, e.g. {changed[:5]}"
