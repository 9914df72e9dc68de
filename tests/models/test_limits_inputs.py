"""Memory estimates (analysis.models.limits), bounded text reading (analysis.data.inputs) and a robust sample listing."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from analysis.data import corpus as data, inputs
from analysis.models import limits, load as models, samples
from analysis.cli.main import main
from analysis.errors import AnalysisError
from family_cases.text_lm import build_tiny


# ---- parameters from the config alone -------------------------------------------------------------

@pytest.mark.parametrize("name", ["deltanet-small", "gated-deltanet-small", "deltanet-recall"])
def test_parameter_count_matches_the_bundled_models(name):
    """card.json's count was measured on the loaded model (sum of its parameters)."""
    config = json.loads((models.SAMPLES_DIR / name / "config.json").read_text())
    card = json.loads((models.SAMPLES_DIR / name / "card.json").read_text())
    assert limits.parameter_count(config) == card["architecture"]["parameters"]


@pytest.mark.parametrize("kind", ["delta_net", "gated_deltanet"])
def test_parameter_count_matches_real_models_exact_and_extrapolated(kind):
    model = build_tiny(kind, num_hidden_layers=3)
    config = model.config.to_dict()
    assert limits.parameter_count(config) == sum(p.numel() for p in model.parameters())
    deep = {**config, "num_hidden_layers": limits.EXACT_LAYERS + 6}   # counted from a 1- and a 2-layer build
    assert limits.parameter_count(deep) == limits._meta_count(deep)


def test_parameter_count_of_a_per_layer_pruned_config():
    from analysis.archs.fla_shared.pruned import PrunedDeltaNetConfig
    from transformers import AutoModelForCausalLM
    config = PrunedDeltaNetConfig(hidden_size=64, num_hidden_layers=3, num_heads=2, vocab_size=512,
                                  head_k_dims=[32, 16, 8])
    model = AutoModelForCausalLM.from_config(config)
    assert limits.parameter_count(config.to_dict()) == sum(p.numel() for p in model.parameters())


def test_available_memory_reads_meminfo_and_falls_back(monkeypatch):
    with open("/proc/meminfo") as fh:
        expected = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    assert abs(limits.available_memory() - expected) < 2**30  # read a moment later: within 1 GiB
    real_open = open

    def no_proc(path, *args, **kwargs):
        if str(path) == "/proc/meminfo":
            raise FileNotFoundError(2, "No such file or directory")
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr("builtins.open", no_proc)
    fallback = limits.available_memory()
    assert fallback is None or fallback > 0


def test_logits_of_8192_tokens_times_64_are_refused_with_the_limit(monkeypatch):
    monkeypatch.setattr(limits, "available_memory", lambda device="cpu": 24 * 10**9)
    model = build_tiny("delta_net")
    assert 64 * 8192 * 8192 * 4 == pytest.approx(17.2e9, rel=1e-2)
    with pytest.raises(AnalysisError, match=r"logits alone 17\.2 GB.*12\.0 GB one request may use.*24\.0 GB available"):
        limits.check_forward(model, 64, 8192, "Running it")
    limits.check_forward(model, 4, 256, "Running it")  # the defaults fit easily
    monkeypatch.setattr(limits, "available_memory", lambda device="cpu": None)
    limits.check_forward(model, 64, 8192, "Running it")  # unknown memory: no refusal


# ---- text: read and tokenise only what is needed ----------------------------------------------------

@pytest.mark.parametrize("split", ["test", "wiki"])
def test_first_tokens_of_a_prefix_equal_the_whole_texts(split):
    tokenizer = data.load_tokenizer()
    whole = data.encode(data.load_text(split), tokenizer)
    for need in (1, 64, 1000, 20000):
        got = inputs.first_token_ids(tokenizer, inputs.resolve_text(split=split), need)
        assert torch.equal(got, whole[:need]), need


def test_a_big_file_is_read_and_tokenised_only_as_far_as_needed(tmp_path, monkeypatch):
    text = data.load_text("test")
    big = tmp_path / "big.txt"
    with open(big, "w", encoding="utf-8") as fh:
        while fh.tell() < 20 * 2**20:
            fh.write(text)
    tokenizer = data.load_tokenizer()
    reads, encoded = [], []
    real_read, real_encode = inputs._read_text, data.encode
    monkeypatch.setattr(inputs, "_read_text", lambda path, n: reads.append(n) or real_read(path, n))
    monkeypatch.setattr(data, "encode", lambda t, tok: encoded.append(len(t)) or real_encode(t, tok))
    ids = inputs.token_batch(tokenizer, inputs.resolve_text(text_file=str(big)), 64, 1)
    assert ids.shape == (1, 64)
    assert torch.equal(ids[0], real_encode(text[:20000], tokenizer)[:64])
    assert max(reads) <= inputs.FIRST_READ and max(encoded) < 10_000  # not 20 MB


def test_a_short_file_is_read_whole_and_too_few_tokens_say_so(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Hello")
    with pytest.raises(AnalysisError, match=r"has only \d+ tokens?, fewer than the 1×16"):
        inputs.token_batch(data.load_tokenizer(), inputs.resolve_text(text_file=str(short)), 16, 1)


# ---- sample_models/: a broken entry is skipped and reported, hidden folders ignored -----------------

@pytest.fixture
def samples_dir(tmp_path, monkeypatch, tiny_dirs):
    root = tmp_path / "samples"
    root.mkdir()
    shutil.copytree(tiny_dirs["delta_net"], root / "good")
    (root / "broken").mkdir()
    (root / "broken" / "config.json").write_text("{ not json")
    (root / "listed").mkdir()
    (root / "listed" / "config.json").write_text("[]")
    shutil.copytree(tiny_dirs["delta_net"], root / ".good.tmp-123")
    monkeypatch.setattr(models, "SAMPLES_DIR", root)
    monkeypatch.setattr(samples, "SAMPLES_DIR", root)  # `models` lists through analysis.models.samples (no torch)
    return root


def test_broken_and_hidden_samples_are_skipped(samples_dir, capsys):
    found, skipped = models.scan_samples()
    assert [s.name for s in found] == ["good"]
    assert sorted(name for name, _ in skipped) == ["broken", "listed"]
    assert main(["models", "--json", "-"]) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert [s["name"] for s in payload["samples"]] == ["good"]
    assert sorted(s["name"] for s in payload["skipped"]) == ["broken", "listed"]
    assert "warning: skipped sample_models/broken" in captured.err and ".good" not in captured.err


def test_unknown_model_error_lists_only_readable_samples(samples_dir, capsys):
    assert main(["rank", "nosuchmodel"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No model named 'nosuchmodel'") and "(good)" in err and "Traceback" not in err
    assert main(["rank", ".good.tmp-123"]) == 2  # a hidden leftover is not a sample name


def test_counts_in_messages_read_as_english():
    from analysis.errors import count
    assert (count(1, "token"), count(2, "token"), count(8192, "token")) == ("1 token", "2 tokens", "8,192 tokens")


def test_calibration_with_fewer_tokens_than_the_key_dim_is_refused():
    from analysis.shrink.calibration import calibrate
    model = build_tiny("delta_net")  # head key dim 32
    with pytest.raises(AnalysisError, match=r"1×16 = 16 tokens gives fewer activation rows than the key dim 32"):
        calibrate(model, data.load_tokenizer(), n_sequences=1, seq_len=16)


def test_model_too_big_for_memory_is_refused_before_loading_with_dtype_advice(tiny_model_dir, monkeypatch):
    """Issue 14: the size and the memory available, and --dtype bfloat16 or a GPU as the way out."""
    from analysis.models import limits, load as models
    from analysis.errors import AnalysisError
    monkeypatch.setattr(limits, "available_memory", lambda device="cpu": 100_000)  # 100 kB free
    built = []
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", lambda *a, **k: built.append(a))
    with pytest.raises(AnalysisError) as info:
        models.load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    message = str(info.value)
    assert "parameters in float32) needs about" in message and "of the 100.0 kB available now" in message
    assert "--dtype bfloat16" in message and "GPU" in message and not built
    with pytest.raises(AnalysisError, match=r"in bfloat16\) needs about .*load it on a GPU \(--device cuda\)"):
        models.load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")
