"""Token batches for an InputSpec: real text through the model's tokenizer, or synthetic recall sequences.

No streamlit here; ui.shared.cache wraps these. Recall models (trained by `python -m analysis train --task
recall`) have no tokenizer: their training.json names the task, and they read recall sequences only.
"""
from __future__ import annotations

from pathlib import Path

import torch

from analysis.data import inputs
from analysis.models.model_inputs import model_batch
from analysis.models import load as models
from analysis.data.recall import RecallTask
from ui.shared.keys import InputSpec


def recall_task_for(model_dir: str) -> RecallTask | None:
    """The recall task a model was trained on (its training.json), or None for a language model."""
    return inputs.recall_task(model_dir)


recall_label = inputs.recall_label


def token_batch(model, tokenizer, spec: InputSpec, task: RecallTask | None) -> tuple[torch.Tensor, str]:
    """(input_ids [sequences, tokens], dataset label) for the spec; the core chooses what the model reads
    (recall models always get recall sequences), exactly as the CLI does."""
    batch = model_batch(model, tokenizer, int(spec.tokens), int(spec.sequences),
                        text=spec.text if spec.kind == "text" else None,
                        split=spec.split if spec.kind != "text" else None, seed=int(spec.seed),
                        what=f"Running the model on {int(spec.sequences)} sequences",
                        advice="lower Tokens per sequence or Number of sequences in the sidebar")
    return batch.ids, batch.label


def display_name(path: str) -> str:
    """A bundled sample by its name, anything else by its path."""
    p = Path(path)
    return p.name if p.parent.resolve() == models.SAMPLES_DIR.resolve() else str(p)
