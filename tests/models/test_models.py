"""Loading, validation messages, and whole tiny models on the CPU path (decode, padding, bf16, training)."""
import json
import shutil

import pytest
import torch

from analysis.models import load as models
from analysis.errors import AnalysisError
from family_cases.text_lm import build_tiny


def test_load_and_describe(tiny_model_dir):
    model = models.load_model(str(tiny_model_dir), device="cpu")
    info = models.describe(model)
    assert info.layers == 2 and info.heads == 2 and info.device == "cpu" and info.dtype == "float32"
    assert info.state_bytes_per_sequence == sum(info.value_heads * dk * info.head_v_dim * 4 for dk in info.head_k_dims)
    assert info.key_tiles_per_head == [1, 1]
    assert not model.training


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist|No model named"),
    ("not_hf", "no config.json"),
    ("gpt2", "not supported.*delta_net"),
    ("truncated", "corrupt or truncated"),
    ("garbage", "corrupt or truncated"),
    ("bin_only", "safetensors"),
])
def test_bad_model_sources(tmp_path, tiny_dirs, case, message):
    target = tmp_path / case
    if case == "not_hf":
        target.mkdir()
        (target / "notes.txt").write_text("hello")
    elif case == "gpt2":
        target.mkdir()
        (target / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    elif case in ("truncated", "garbage", "bin_only"):
        shutil.copytree(tiny_dirs["delta_net"], target)
        weights = target / "model.safetensors"
        if case == "truncated":
            weights.write_bytes(weights.read_bytes()[:-1000])
        elif case == "garbage":
            weights.write_bytes(b"\x00" * 64)
        else:
            weights.rename(target / "pytorch_model.bin")
    with pytest.raises(AnalysisError, match=message):
        models.load_model(str(target), device="cpu")


def test_unknown_sample_lists_available():
    with pytest.raises(AnalysisError, match="not a bundled sample"):
        models.load_model("no-such-sample", device="cpu")


def test_hub_id_offline_fails_with_one_sentence(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AnalysisError, match="not in the local Hugging Face cache .* HF_HUB_OFFLINE is set"):
        models.load_model("fla-hub/delta_net-1.3B-100B", device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu():
    with pytest.raises(AnalysisError, match="no usable GPU"):
        models.resolve_device("cuda")


@pytest.mark.parametrize("kind", ["delta_net", "gated_deltanet"])
def test_decode_padding_generate_bf16_and_training(kind):
    model = build_tiny(kind, use_gate=True) if kind == "delta_net" else build_tiny(kind)
    ids = torch.randint(0, 8192, (2, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids, use_cache=True)
        cache = model(ids[:, :90], use_cache=True).past_key_values
        steps = []
        for t in range(90, 100):
            out = model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
        assert (torch.cat(steps, 1) - full.logits[:, 90:]).abs().max() < 1e-4
        for i in range(2):
            assert torch.allclose(cache[i]["recurrent_state"], full.past_key_values[i]["recurrent_state"], atol=1e-5)
        mask = torch.ones_like(ids)
        mask[1, :10] = 0  # left padding
        padded = model(ids, attention_mask=mask).logits
        assert (padded[1, 10:] - model(ids[1:, 10:]).logits[0]).abs().max() < 1e-4
        generated = model.generate(ids[:, :5], attention_mask=torch.ones_like(ids[:, :5]), max_new_tokens=4,
                                   do_sample=False)
        assert generated.shape == (2, 9)
        bf16 = build_tiny(kind).to(torch.bfloat16)
        assert torch.isfinite(bf16(ids).logits.float()).all()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        loss = model(ids[:, :64], labels=ids[:, :64]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
