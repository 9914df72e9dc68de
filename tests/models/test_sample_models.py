"""The bundled checkpoints: load by name and with plain transformers, and match their model cards."""
import json

import pytest
import torch

from analysis.models import load as models

SAMPLES = {s.name: s for s in models.list_samples()}
LM_SAMPLES = [n for n in ("deltanet-small", "gated-deltanet-small", "qwen35-hybrid-small", "granite-h-small",
                          "gated-deltanet-deep") if n in SAMPLES]


def test_bundled_samples_exist():
    assert {"deltanet-small", "gated-deltanet-small", "deltanet-recall"} <= set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_loads_by_name_and_with_transformers(name):
    from transformers import AutoModelForCausalLM
    model = models.load_model(name, device="cpu")
    plain = AutoModelForCausalLM.from_pretrained(SAMPLES[name].path)
    ids = torch.randint(1, 200, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, plain(ids).logits)
    size = sum(f.stat().st_size for f in models.SAMPLES_DIR.joinpath(name).glob("*.safetensors"))
    assert size <= 25 * 2**20


@pytest.mark.parametrize("name", LM_SAMPLES)
def test_test_perplexity_matches_card(name):
    from analysis.evaluate.perplexity import perplexity
    card = json.loads((models.SAMPLES_DIR / name / "card.json").read_text())
    model = models.load_model(name, device="cpu")
    result = perplexity(model, models.load_tokenizer(model), "test", context=256, max_tokens=2048)
    assert result["perplexity"] == pytest.approx(card["test_first_2k"]["perplexity"], rel=0.01)


def test_recall_model_meets_its_card():
    if "deltanet-recall" not in SAMPLES:
        pytest.skip("deltanet-recall is not bundled")
    card = json.loads((models.SAMPLES_DIR / "deltanet-recall" / "card.json").read_text())
    trained = [r for r in card["recall"]["by_pairs"] if r["pairs"] == card["recall"]["trained_pairs"]][0]
    assert trained["accuracy"] >= 0.95
