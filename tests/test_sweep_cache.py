"""The sweep cache: a key that sees every weight byte and every setting, and safe reads and writes."""
import copy
import warnings

import pytest
import torch

from analysis import data
from analysis import sweep as sweep_mod
from analysis.errors import AnalysisError
from analysis.prune import build_pruned
from analysis.sweep import fingerprint
from conftest import build_tiny
from test_pure_removal import random_selections

SMALL = dict(strategies=["l1"], ratios=[0.5], eval_tokens=128, context=64, latency=False)


def test_fingerprint_sees_bytes_after_the_first_4_kib():
    model = build_tiny("delta_net")
    twin = copy.deepcopy(model)
    with torch.no_grad():  # same shape, same first 4 KiB, same sum: only bytes far into the tensor differ
        flat = twin.model.embeddings.weight.view(-1)
        flat[5000] += 1e-3
        flat[9000] -= 1e-3
    a, b = model.model.embeddings.weight.detach().view(-1), twin.model.embeddings.weight.detach().view(-1)
    assert torch.equal(a[:1024], b[:1024]) and f"{a.sum():.6e}" == f"{b.sum():.6e}"
    assert fingerprint(model) != fingerprint(twin)
    assert fingerprint(model) == fingerprint(copy.deepcopy(model))


def test_fingerprint_sees_the_readout_scale():
    """Two pruned models with identical weights but different readout scales behave differently."""
    model = build_tiny("gated_deltanet")
    selections = random_selections(model, [8, 16])
    assert fingerprint(build_pruned(model, selections, "original")) != \
        fingerprint(build_pruned(model, selections, "default"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_mod, "CACHE_DIR", tmp_path / "cache")
    return tmp_path / "cache"


def test_corrupt_cache_file_is_recomputed_with_a_warning(cache_dir):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = list(sweep_mod.sweep(model, tok, **SMALL))
    files = sorted(cache_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    assert len(files) == 2
    files[-1].write_text(files[-1].read_text()[:20])           # truncated mid-write
    with pytest.warns(UserWarning, match="unreadable.*recomputing"):
        again = list(sweep_mod.sweep(model, tok, **SMALL))
    assert [p["cached"] for p in again] == [True, False]
    assert again[1]["perplexity"] == first[1]["perplexity"]
    files[-1].write_bytes(b"\xff\xfe\x00garbage")              # not even text
    with pytest.warns(UserWarning, match="unreadable"):
        assert [p["cached"] for p in sweep_mod.sweep(model, tok, **SMALL)] == [True, False]
    with warnings.catch_warnings():                             # repaired: served from the cache silently
        warnings.simplefilter("error")
        assert all(p["cached"] for p in sweep_mod.sweep(model, tok, **SMALL))


def test_rescale_mode_is_part_of_the_key(cache_dir):
    model, tok = build_tiny("gated_deltanet"), data.load_tokenizer()
    original = list(sweep_mod.sweep(model, tok, **SMALL))
    default = list(sweep_mod.sweep(model, tok, **SMALL, rescale="default"))
    assert [p["cached"] for p in default] == [True, False]     # the baseline is shared, the pruned point is not
    assert (original[1]["rescale"], default[1]["rescale"]) == ("original", "default")
    assert original[1]["perplexity"] != default[1]["perplexity"]
    assert original[1]["calibration"] == "none (data-free)"
    with pytest.raises(AnalysisError, match="one of original, default"):
        next(sweep_mod.sweep(model, tok, **SMALL, rescale="dk"))


def test_unwritable_cache_dir_is_one_sentence_before_any_work(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(sweep_mod, "CACHE_DIR", blocker / "cache")
    monkeypatch.setattr(sweep_mod, "_evaluate", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(AnalysisError, match=r"^Cannot write the sweep cache in .*STATE_RANK_CACHE"):
        next(sweep_mod.sweep(build_tiny("delta_net"), data.load_tokenizer(), **SMALL))
