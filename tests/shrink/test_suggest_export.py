"""Ratios suggested from the rank profile, the zip of a saved model, and the before/after measurement."""
import io
import json
import zipfile

import pytest

from analysis.errors import AnalysisError
from analysis.io.export import model_zip, zip_directory
from analysis.shrink.suggest import suggest_ratios


def test_lower_utilization_prunes_more_and_the_mean_is_the_target():
    ratios = suggest_ratios([0.1, 0.5, 0.9, 0.3], 0.5)
    assert ratios[0] > ratios[3] > ratios[1] > ratios[2]
    assert sum(ratios) / 4 == pytest.approx(0.5)
    assert all(0.0 <= r <= 0.9 for r in ratios)


def test_bounds_clip_and_the_rest_absorbs_the_difference():
    ratios = suggest_ratios([0.01, 0.5, 0.5], 0.5, min_ratio=0.2, max_ratio=0.7)
    assert ratios[0] == pytest.approx(0.7) and ratios[1] == pytest.approx(ratios[2])
    assert sum(ratios) / 3 == pytest.approx(0.5)


def test_flat_or_empty_profiles_give_the_uniform_target():
    assert suggest_ratios([0.3, 0.3], 0.4) == pytest.approx([0.4, 0.4])
    assert suggest_ratios([0.0, 0.0], 0.4) == [0.4, 0.4]
    assert suggest_ratios([float("nan"), 0.2], 0.4) == pytest.approx([0.4, 0.4])  # NaN: the mean of the rest
    assert suggest_ratios([0.0, 0.5], 0.0) == [0.0, 0.0]


def test_key_dims_weight_the_mean_by_channels():
    ratios = suggest_ratios([0.2, 0.6], 0.5, key_dims=[128, 64])
    assert (128 * ratios[0] + 64 * ratios[1]) / 192 == pytest.approx(0.5)


def test_tile_rounding_lands_on_multiples_and_keeps_the_total():
    dims = [128, 128, 128, 128]
    ratios = suggest_ratios([0.1, 0.3, 0.6, 0.9], 0.5, round_to=32, key_dims=dims)
    kept = [round(d * (1 - r)) for d, r in zip(dims, ratios)]
    assert all(k % 32 == 0 and 32 <= k <= 128 for k in kept)
    assert sum(kept) == 256 and kept == sorted(kept)
    from analysis.models.key_plan import plan_key_dims
    from family_cases.text_lm import build_tiny
    model = build_tiny("delta_net", expand_k=2.0, num_hidden_layers=4)  # dk = 64
    planned = suggest_ratios([0.1, 0.2, 0.7, 0.8], 0.5, round_to=16, key_dims=[64] * 4)
    dks = plan_key_dims(model, ratios=planned, round_to=16)
    assert all(d % 16 == 0 for d in dks) and sum(dks) == 128


@pytest.mark.parametrize("kwargs,message", [
    (dict(rank_utilization_per_layer=[], target_ratio=0.5), "empty"),
    (dict(rank_utilization_per_layer=[0.5], target_ratio=0.95), "outside"),
    (dict(rank_utilization_per_layer=[0.5], target_ratio=0.5, min_ratio=0.95), "min ratio"),
    (dict(rank_utilization_per_layer=[0.5], target_ratio=0.5, round_to=16), "key_dims"),
    (dict(rank_utilization_per_layer=[0.5], target_ratio=0.5, round_to=8, key_dims=[64]), "16, 32 or 64"),
    (dict(rank_utilization_per_layer=[0.5, 0.2], target_ratio=0.5, key_dims=[64]), "one per layer"),
])
def test_bad_input_is_one_sentence(kwargs, message):
    with pytest.raises(AnalysisError, match=message):
        suggest_ratios(**kwargs)


def test_zip_is_deterministic_and_complete(tmp_path):
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "sub" / "b.bin").write_bytes(b"\x00\x01")
    first = zip_directory(root)
    (root / "config.json").touch()  # a new mtime must not change the bytes
    assert zip_directory(root) == first
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert names == ["model/config.json", "model/sub/b.bin"]
    with pytest.raises(AnalysisError, match="not a directory"):
        zip_directory(tmp_path / "missing")


def test_model_zip_round_trips_a_pruned_model(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    from family_cases.text_lm import build_tiny
    model = build_tiny("delta_net")
    pruned = prune(model, "l1", plan_key_dims(model, ratio=0.5)).model
    data = model_zip(pruned, "small", metadata={"note": "zip"})
    zipfile.ZipFile(io.BytesIO(data)).extractall(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "small")
    ids = torch.randint(0, 8192, (1, 20), generator=torch.Generator().manual_seed(0))
    assert loaded.config.head_k_dims == [16, 16] and torch.allclose(loaded(ids).logits, pruned(ids).logits)
    assert json.loads((tmp_path / "small" / "pruning.json").read_text()) == {"note": "zip"}


def test_recall_models_keep_their_task_file(tmp_path):
    from analysis.io.export import carry_recall_task
    from family_cases.text_lm import build_tiny
    source = tmp_path / "recall"
    source.mkdir()
    (source / "training.json").write_text(json.dumps({"task": "recall", "recall_keys": 16, "recall_pairs": 4}))
    data = model_zip(build_tiny("delta_net", vocab_size=33), "pruned", source=source)
    assert "pruned/training.json" in zipfile.ZipFile(io.BytesIO(data)).namelist()
    (source / "training.json").write_text(json.dumps({"task": "lm"}))  # a language model's record stays behind
    carry_recall_task(source, tmp_path)
    assert not (tmp_path / "training.json").exists()


def test_measure_before_and_after_with_labels():
    from analysis.data import corpus as data
    from analysis.evaluate.measure import Evaluation, measure
    from family_cases.text_lm import build_tiny
    m = measure(build_tiny("gated_deltanet"), data.load_tokenizer(), Evaluation(context=32, max_tokens=64))
    assert m["head_k_dims"] == [32, 32] and m["perplexity"]["context"] == 32 and m["perplexity"]["tokens"] == 64
    assert m["kernel"]["key_dims"] == [32, 32] and m["kernel"]["op"] == "gated delta rule" and m["kernel"]["device"] == "cpu"


def test_a_per_layer_plan_is_timed_at_every_layers_key_dim(monkeypatch):
    """Issue 20: a per-layer plan was timed at layer 0's key dim only; the table shows the whole model's time."""
    import analysis.evaluate.measure
    from analysis.shrink.prune import prune
    from family_cases.text_lm import build_tiny
    asked = []

    def fake(dims, **kwargs):
        asked.append(list(dims))
        for d in dims:
            ms = d / 16
            yield {"key_dim": d, "median_ms": ms, "repeats": 15, "threads": 1, "noisy": False,
                   "spread": {"iqr_ms": 0.1, "min_ms": ms - 0.1, "max_ms": ms + 0.2}, "op": "delta rule", "kernel": "delta_rule", "batch": 2, "tokens": 512,
                   "heads": 4, "value_dim": 16, "dtype": "float32", "device": "cpu", "device_name": "CPU",
                   "timer": "t"}
    monkeypatch.setattr(analysis.evaluate.measure, "kernel_latency", fake)
    pruned = prune(build_tiny("delta_net"), "l1", [16, 32]).model
    k = analysis.evaluate.measure.model_kernel_time(pruned, analysis.evaluate.measure.describe(pruned))
    assert asked == [[16, 32]] and k["key_dims"] == [16, 32]
    assert k["per_layer_ms"] == [1.0, 2.0] and abs(k["median_ms"] - 3.0) < 1e-12
