"""Issue 41, probe row 1: calibrated head scoring that would not fit the memory budget is refused before the work, in
one sentence with its estimate, under every calibrated head strategy of the registry (the peak of what does fit is
tests/shrink/test_streamed_head_budget.py, slow)."""
from __future__ import annotations

import pytest

from analysis.cli.main import main
from analysis.shrink.heads.strategies import HEAD_STRATEGIES
from family_cases.text_lm import build_tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CALIBRATED = [name for name, s in HEAD_STRATEGIES.items() if s.needs_calibration]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A 22 MB Gated DeltaNet (hidden 128, 12 layers, untied), streamed under a 20 MiB budget."""
    folder = tmp_path_factory.mktemp("heads-memory") / "model"
    build_tiny("gated_deltanet", hidden_size=128, num_hidden_layers=12, num_heads=4, head_dim=32,
               tie_word_embeddings=False).save_pretrained(folder)
    return folder


def test_every_head_strategy_is_in_one_of_the_two_checks():
    assert CALIBRATED and set(HEAD_STRATEGIES) - set(CALIBRATED) == {"random"}
    for name in CALIBRATED:   # each calibrated strategy has its own estimate, not the no-op default
        assert type(HEAD_STRATEGIES[name]).check_memory is not type(HEAD_STRATEGIES["random"]).check_memory, name


@pytest.mark.parametrize("strategy", CALIBRATED)
def test_head_scoring_over_the_budget_is_one_sentence_before_the_work(model_dir, tmp_path, capsys, monkeypatch,
                                                                     strategy):
    import analysis.inspect.states as states
    import analysis.shrink.heads.sensitivity as sensitivity
    from analysis.data import inputs
    began = []
    for module, name in ((states, "collect_states"), (sensitivity, "head_removal_losses"),
                         (inputs, "calibration_batch")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: began.append(_name) or _real(*a, **k))
    code = main(["prune", str(model_dir), "--heads", "0.5", "--head-strategy", strategy, "--calib-sequences", "2",
                 "--calib-tokens", "16384", "--max-memory", "20MiB", "--quiet", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    last = err.splitlines()[-1]
    assert last.startswith("error: ") and last.endswith(".") and last.count(". ") == 0, err
    assert "2 × 16,384 calibration tokens" in last and "needs about" in last and "20.0 MiB" in last, last
    assert "--calib-tokens" in last, last
    assert began == [] and not (tmp_path / "out").exists()   # refused before any sequence was drawn


@pytest.mark.parametrize("strategy", [pytest.param(name, marks=() if name == "norm" else pytest.mark.slow)
                                      for name in CALIBRATED])
def test_head_scoring_that_fits_runs_within_the_same_budget(model_dir, tmp_path, capsys, strategy):
    """The same model and budget with 2 × 16 calibration tokens: the estimate, which counts the encoded train split
    (10 MiB), lets it run (no false refusal)."""
    code = main(["prune", str(model_dir), "--heads", "0.5", "--head-strategy", strategy, "--calib-sequences", "2",
                 "--calib-tokens", "16", "--eval-tokens", "128", "--eval-context", "64", "--max-memory", "20MiB",
                 "--quiet", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "streaming: one block at a time" in err, err
