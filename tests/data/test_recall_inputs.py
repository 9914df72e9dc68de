"""A recall model (no tokenizer) reads its own recall sequences everywhere: CLI and dashboard choose the
input in one core function (analysis.data.inputs), and every label says what was really used."""
import json

import torch

from analysis.data import inputs
from analysis.models.model_inputs import model_batch
from analysis.models import load as models
from analysis.shrink.calibration import calibrate
from analysis.cli.main import main
from analysis.data.recall import recall_batch
from analysis.data.recall import task_of


def test_importance_on_deltanet_recall_runs_on_recall_sequences(capsys):
    """Was a one-sentence refusal (and an IndexError traceback before that)."""
    code = main(["importance", "deltanet-recall", "--strategies", "l1,wanda", "--calib-sequences", "4",
                 "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    report = json.loads(out.out)
    task = task_of(models.load_model("deltanet-recall"))
    assert report["calibration"] == f"4×{task.seq_len} tokens of synthetic recall sequences (seed 0)"
    assert "Shakespeare" not in out.out and report["strategies"] == ["l1", "wanda"]


def test_rank_on_deltanet_recall_runs_on_recall_sequences(capsys):
    code = main(["rank", "deltanet-recall", "--batch", "2", "--stride", "16", "--json", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    report = json.loads(out.out)
    task = task_of(models.load_model("deltanet-recall"))
    assert report["dataset"] == f"synthetic recall sequences ({task.n_pairs} pairs, {task.n_keys} keys, seed 0)"
    assert report["tokens"] == task.seq_len and report["batch"] == 2
    assert report["trace"]["positions"][-1] == task.seq_len - 1


def test_cli_and_dashboard_feed_the_same_recall_batch():
    """ui.shared.batches (the dashboard) and the CLI go through model_inputs.model_batch: same ids, same label."""
    from ui.shared.batches import token_batch
    from ui.shared.keys import InputSpec
    model = models.load_model("deltanet-recall")
    task = inputs.recall_task(model)
    ids, label = token_batch(model, None, InputSpec(kind="recall", sequences=3, seed=5), task)
    core = model_batch(model, None, 256, 3, seed=5)
    assert torch.equal(ids, core.ids) and label == core.label
    assert torch.equal(ids, recall_batch(task, 3, torch.Generator().manual_seed(5))[0])


def test_calibration_label_says_what_was_used():
    recall = models.load_model("deltanet-recall")
    calib = calibrate(recall, None, n_sequences=2, seq_len=256, seed=3)
    task = inputs.recall_task(recall)
    assert calib.label == f"2×{task.seq_len} tokens of synthetic recall sequences (seed 3)"
    assert torch.equal(calib.input_ids, recall_batch(task, 2, torch.Generator().manual_seed(3))[0])
    text = models.load_model("deltanet-small")
    calib = calibrate(text, models.load_tokenizer(text), n_sequences=2, seq_len=64)
    assert calib.label == "2×64 tokens of the Shakespeare train split"
    given = calibrate(text, None, input_ids=calib.input_ids, label="my ids")
    assert given.label == "my ids"


def test_language_model_is_not_a_recall_model():
    assert inputs.recall_task(models.load_model("deltanet-small")) is None
    assert inputs.recall_task("/nonexistent/dir") is None
