"""Sweeps (generator + disk cache), latency labels, the recall task, and the dense rank trace."""
import torch

from analysis.data import corpus as data
from analysis.io import point_cache
from analysis.evaluate.latency import kernel_latency, model_latency
from analysis.inspect.rank_trace import collect_utilization_trace
from analysis.data.recall import RecallTask, recall_accuracy, recall_batch
from analysis.inspect.states import collect_states
from analysis.evaluate.measure import Evaluation
from analysis.shrink.calibration import CalibrationSettings
from family_cases.text_lm import build_tiny


def test_sweep_yields_points_and_reruns_from_cache(tmp_path, monkeypatch):
    from analysis.runs import sweep as sweep_mod
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path)
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    kwargs = dict(strategies=["random", "l1"], ratios=[0.5], evaluation=Evaluation(max_tokens=512, latency=False),
                  calib=CalibrationSettings(2))
    first = list(sweep_mod.sweep(model, tok, **kwargs))
    assert [p["strategy"] for p in first] == ["unpruned", "random", "l1"]
    assert all(not p["cached"] for p in first)
    assert first[1]["head_k_dims"] == [16, 16] and "delta_vs_unpruned" in first[1]
    for key in ("dataset", "split", "context", "tokens", "parameters", "state_bytes_per_sequence"):
        assert key in first[1]
    again = list(sweep_mod.sweep(model, tok, **kwargs))
    assert all(p["cached"] for p in again)
    assert [p["perplexity"] for p in again] == [p["perplexity"] for p in first]


def test_kernel_latency_is_labelled():
    points = list(kernel_latency([8, 16], batch=1, tokens=64, heads=2, value_dim=16, min_run_time=0.01))
    assert [p["key_dim"] for p in points] == [8, 16]
    for p in points:
        assert p["ms"] > 0 and p["device"] == "cpu" and p["dtype"] == "float32" and "1 CPU thread" in p["timer"]
    whole = model_latency(build_tiny("gated_deltanet"), batch=1, tokens=32, min_run_time=0.01)
    assert whole["ms"] > 0 and whole["device"] == "cpu"


def test_recall_batches_and_accuracy():
    task = RecallTask(n_keys=16, n_values=16, n_pairs=4, n_queries=3)
    ids, labels = recall_batch(task, 5, torch.Generator().manual_seed(0))
    assert ids.shape == (5, task.seq_len) and (labels != -100).sum() == 15
    pairs = dict(zip(ids[0, 0:8:2].tolist(), ids[0, 1:8:2].tolist()))
    for t in range(9, task.seq_len, 2):  # each labelled value is the one stored for the preceding key
        assert labels[0, t] == pairs[int(ids[0, t - 1])]
    model = build_tiny("delta_net", vocab_size=task.vocab_size)
    acc = recall_accuracy(model, task, n_sequences=8)
    assert 0.0 <= acc <= 1.0


def test_dense_rank_trace_matches_svd_metrics():
    model = build_tiny("gated_deltanet")
    ids = torch.randint(0, 8192, (2, 70), generator=torch.Generator().manual_seed(4))
    dense = collect_utilization_trace(model, ids)
    exact = collect_states(model, ids, stride=1)
    for fast, layer in zip(dense, exact.layers):
        assert fast["rank_utilization"].shape == (2, 2, 70)
        assert (fast["rank_utilization"] - layer.metrics["rank_utilization"]).abs().max() < 1e-4
