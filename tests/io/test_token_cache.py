"""The encoded split kept on disk (analysis.io.token_cache): the next process reads exactly the ids encode() gives,
an entry that does not check out is never believed, and a folder that cannot be written changes nothing."""
import os

import pytest
import torch

from analysis.data import corpus
from analysis.io import token_cache

SPLIT = "validation"  # the smallest bundled split: a quick encode


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A private cache folder and an empty in-process cache (as a new process starts)."""
    monkeypatch.setattr(token_cache, "CACHE_DIR", tmp_path / "encoded")
    monkeypatch.setattr(corpus, "_ENCODED", {})
    return tmp_path / "encoded"


def test_a_new_process_reads_the_ids_encode_gives(fresh, monkeypatch):
    tok = corpus.load_tokenizer()
    whole = corpus.encode(corpus.load_text(SPLIT), tok)
    assert torch.equal(corpus.encoded_split(SPLIT, tok), whole)
    assert len(list(fresh.glob("*.json"))) == 1
    monkeypatch.setattr(corpus, "_ENCODED", {})
    monkeypatch.setattr(corpus, "encode", lambda *a: pytest.fail("encoded again although the disk holds the ids"))
    again = corpus.encoded_split(SPLIT, tok)
    assert again.dtype == torch.long and torch.equal(again, whole)


def test_a_changed_entry_is_not_believed(fresh, monkeypatch):
    tok = corpus.load_tokenizer()
    whole = corpus.encoded_split(SPLIT, tok)
    entry = next(fresh.glob("*.json"))
    text = entry.read_text()
    at = text.index('"ids": "') + 20
    entry.write_text(text[:at] + ("B" if text[at] != "B" else "C") + text[at + 1:])  # one id flipped, same length
    monkeypatch.setattr(corpus, "_ENCODED", {})
    assert torch.equal(corpus.encoded_split(SPLIT, tok), whole)
    monkeypatch.setattr(corpus, "_ENCODED", {})
    entry.write_text("not json")
    assert torch.equal(corpus.encoded_split(SPLIT, tok), whole)


def test_another_tokenizer_or_text_is_another_entry(fresh):
    key = {"split": SPLIT, "text_sha256": "a", "tokenizer": "b", "encoder": {"piece": 1, "cut_window": 1}}
    token_cache.store(key, torch.tensor([1, 2, 3]))
    assert torch.equal(token_cache.lookup(key), torch.tensor([1, 2, 3]))
    assert token_cache.lookup({**key, "tokenizer": "c"}) is None
    assert token_cache.lookup({**key, "text_sha256": "d"}) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_folder_that_cannot_be_written_changes_nothing(fresh):
    fresh.mkdir()
    fresh.chmod(0o500)
    try:
        tok = corpus.load_tokenizer()
        assert torch.equal(corpus.encoded_split(SPLIT, tok), corpus.encode(corpus.load_text(SPLIT), tok))
        assert not list(fresh.iterdir())
    finally:
        fresh.chmod(0o700)


def test_something_else_at_the_entry_name_is_left_alone(fresh):
    key = {"split": SPLIT, "text_sha256": "a", "tokenizer": "b", "encoder": {}}
    path = token_cache.entry_path(key)
    path.mkdir(parents=True)
    token_cache.store(key, torch.tensor([1, 2]))
    assert path.is_dir() and token_cache.lookup(key) is None
