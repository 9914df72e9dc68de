"""Perplexity windows score every token once; numbers match a brute-force loop; labels are complete."""
import math

import pytest
import torch

from analysis.data import corpus as data
from analysis.errors import AnalysisError
from analysis.evaluate.perplexity import _scored_windows, perplexity, unigram_baseline
from family_cases.text_lm import build_tiny


@pytest.mark.parametrize("n, context, stride", [(100, 16, 16), (100, 16, 5), (17, 16, 16), (40, 7, 3)])
def test_each_target_scored_exactly_once(n, context, stride):
    scored = []
    for start, end, first in _scored_windows(n, context, stride):
        assert end - start <= context
        scored += list(range(start + 1 + first, end + 1))
    assert scored == list(range(1, n))


def test_perplexity_matches_brute_force_and_is_labelled():
    model = build_tiny("delta_net")
    tok = data.load_tokenizer()
    result = perplexity(model, tok, "validation", context=32, stride=32, max_tokens=200)
    ids = data.encode(data.load_text("validation"), tok)[:201]
    nats = 0.0
    with torch.no_grad():
        for s in range(0, 200, 32):
            window = ids[s:min(s + 32, 200)]
            logp = torch.log_softmax(model(window[None]).logits[0].float(), -1)
            targets = ids[s + 1:s + 1 + len(window)]
            nats -= float(logp.gather(-1, targets[:, None]).sum())
    assert result["tokens"] == 200
    assert math.isclose(result["perplexity"], math.exp(nats / 200), rel_tol=1e-5)
    for key in ("perplexity", "bits_per_byte", "dataset", "split", "context", "stride", "tokens", "device", "dtype"):
        assert key in result
    assert result["split"] == "validation" and "Shakespeare" in result["dataset"]
    assert result["bits_per_byte"] == pytest.approx(nats / math.log(2) / result["bytes"])


def test_long_context_note_and_short_text_error():
    model = build_tiny("delta_net", max_position_embeddings=16)
    tok = data.load_tokenizer()
    assert "longer than" in perplexity(model, tok, "validation", context=32, max_tokens=64)["note"]
    with pytest.raises(AnalysisError, match="fewer than one context"):
        perplexity(model, tok, text="To be or not", context=64)
    with pytest.raises(AnalysisError, match="stride"):
        perplexity(model, tok, "validation", context=16, stride=32)


def test_unigram_baseline_is_far_worse_than_uniform_is_not():
    tok = data.load_tokenizer()
    uni = unigram_baseline(tok, "test", max_tokens=5000)
    assert uni["perplexity"] < len(tok)  # better than uniform over the vocabulary
    assert 2.0 < uni["bits_per_byte"] < 4.0
