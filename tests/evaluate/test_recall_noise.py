"""Recall accuracy under query noise: clean at very high SNR, degraded at very low SNR."""
import pytest
import torch

from analysis.errors import AnalysisError
from analysis.data.recall import RecallTask, recall_accuracy, recall_batch
from analysis.evaluate.recall_noise import query_positions, recall_accuracy_at
from family_cases.text_lm import build_tiny

TASK = RecallTask(n_keys=16, n_values=16, n_pairs=4, n_queries=4)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained_recall(tmp_path_factory):
    """A tiny DeltaNet trained on a 4-pair recall task (~100 steps, a few seconds on CPU, >90% accuracy)."""
    from analysis.train.trainer import TrainConfig, train
    cfg = TrainConfig(out=str(tmp_path_factory.mktemp("recall-run")), task="recall", hidden_size=64, layers=2,
                      heads=2, head_dim=32, batch=32, steps=120, warmup=20, lr=3e-3, eval_every=1000,
                      checkpoint_every=10000, recall_pairs=TASK.n_pairs, recall_keys=TASK.n_keys)
    model, _ = train(cfg, log=lambda _line: None)
    return model.eval()


def test_query_positions_are_the_queried_keys():
    ids, labels = recall_batch(TASK, 3, torch.Generator().manual_seed(0))
    mask = query_positions(labels)
    start = 2 * TASK.n_pairs
    assert mask.sum(1).tolist() == [TASK.n_queries] * 3
    assert mask[:, start::2].all() and not mask[:, :start].any()


def test_high_snr_is_clean_and_low_snr_drops(trained_recall):
    clean = recall_accuracy(trained_recall, TASK, n_sequences=128)
    assert clean > 0.6, "the fixture model should have learned the task"
    high, low = (recall_accuracy_at(trained_recall, TASK, snr, n_sequences=128) for snr in (300.0, -30.0))
    assert recall_accuracy_at(trained_recall, TASK, None, n_sequences=128)["accuracy"] == pytest.approx(clean)
    assert high["accuracy"] == pytest.approx(clean)
    assert low["accuracy"] < clean - 0.3
    assert high["queries"] == low["queries"] == 128 * TASK.n_queries


def test_gated_deltanet_takes_the_unfused_convolutions():
    model = build_tiny("gated_deltanet", vocab_size=TASK.vocab_size)
    clean = recall_accuracy(model, TASK, n_sequences=32)
    high = recall_accuracy_at(model, TASK, 300.0, n_sequences=32)["accuracy"]
    unnoised = recall_accuracy_at(model, TASK, None, n_sequences=32)["accuracy"]
    assert high == pytest.approx(clean) == pytest.approx(unnoised)


def test_bad_requests_are_one_sentence_errors():
    model = build_tiny("delta_net", vocab_size=TASK.vocab_size)
    with pytest.raises(AnalysisError, match="SNR"):
        recall_accuracy_at(model, TASK, float("nan"))
    with pytest.raises(AnalysisError, match="vocabulary"):
        recall_accuracy_at(model, RecallTask(n_keys=128, n_values=128), 10.0, n_sequences=4)


def test_a_point_stops_at_the_next_batch_and_a_token_that_never_fires_changes_nothing():
    """The dashboard's recall job passes its cancel token: checked before each batch of 64 sequences."""
    from analysis.evaluate.recall_noise import recall_accuracy_at
    from analysis.runtime.cancel import Cancelled
    model = build_tiny("delta_net", vocab_size=TASK.vocab_size)
    plain = recall_accuracy_at(model, TASK, 10.0, n_sequences=96)
    assert recall_accuracy_at(model, TASK, 10.0, n_sequences=96, cancel=lambda: False) == plain
    asked = []

    def after_one_batch():
        asked.append(1)
        return len(asked) > 1
    with pytest.raises(Cancelled):
        recall_accuracy_at(model, TASK, 10.0, n_sequences=96, cancel=after_one_batch)
    assert len(asked) == 2  # the second of two batches never ran
