"""Token batches for an InputSpec: real text through the model's tokenizer, or synthetic recall sequences.

No streamlit here; ui.cache wraps these. Recall models (trained by `python -m analysis train --task
recall`) have no tokenizer: their training.json names the task, and they read recall sequences only.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from analysis import inputs, limits, models
from analysis.errors import AnalysisError
from analysis.recall import RecallTask, recall_batch
from analysis.recall_eval import task_of
from ui.keys import InputSpec


def recall_task_for(model_dir: str) -> RecallTask | None:
    """The recall task a model was trained on (its training.json), or None for a language model."""
    try:
        return task_of(SimpleNamespace(analysis_source=model_dir))
    except (AnalysisError, OSError, ValueError, KeyError):
        return None


def recall_label(task: RecallTask, seed: int) -> str:
    return f"synthetic recall sequences ({task.n_pairs} pairs, {task.n_keys} keys, seed {seed})"


def token_batch(model, tokenizer, spec: InputSpec, task: RecallTask | None) -> tuple[torch.Tensor, str]:
    """(input_ids [sequences, tokens], dataset label) for the spec; recall models always get recall sequences."""
    limits.check_forward(model, int(spec.sequences), int(spec.tokens if task is None else task.seq_len),
                         f"Running the model on {int(spec.sequences)} sequences",
                         "lower Tokens per sequence or Number of sequences in the sidebar")
    if task is not None:
        ids, _ = recall_batch(task, int(spec.sequences), torch.Generator().manual_seed(int(spec.seed)))
        return ids, recall_label(task, spec.seed)
    source = inputs.resolve_text(text=spec.text) if spec.kind == "text" else inputs.resolve_text(split=spec.split)
    ids = inputs.token_batch(tokenizer, source, int(spec.tokens), int(spec.sequences),
                             vocab_size=model.config.vocab_size)
    return ids, source.label


def display_name(path: str) -> str:
    """A bundled sample by its name, anything else by its path."""
    p = Path(path)
    return p.name if p.parent.resolve() == models.SAMPLES_DIR.resolve() else str(p)
