"""What a given model reads, checked to fit before it runs: labelled batches of text or of its recall task.

The CLI and the dashboard both call `model_batch`, so they feed a model the same ids and label them the same way;
the batches themselves come from `analysis.data.inputs`, the memory check from `analysis.models.limits`.
"""
from __future__ import annotations

import torch

from analysis.data import inputs
from analysis.errors import AnalysisError
from analysis.models import limits


def model_batch(model, tokenizer, tokens: int, sequences: int, *, text_file: str | None = None,
                split: str | None = None, text: str | None = None, seed: int = 0,
                what: str | None = None, advice: str = "use fewer tokens or sequences",
                states: bool | int = True) -> inputs.ModelBatch:
    """`sequences` × `tokens` ids of the named text, or for a recall model `sequences` recall sequences of
    its task (their length is the task's; `seed` draws them), after checking the forward pass fits (`states`: the
    states traced per chunk, analysis.models.limits.recurrence_bytes)."""
    task = inputs.recall_task(model)
    name = getattr(model, "analysis_name", "this model")
    if task is not None and (text_file is not None or text is not None):
        raise AnalysisError(f"{name} is an associative-recall model without a tokenizer: it reads its own recall "
                            "sequences, not text; leave out the text to analyse it on those.")
    length = task.seq_len if task is not None else int(tokens)
    limits.check_forward(model, int(sequences), length, what or f"Running {name} on {int(sequences)} sequences",
                         advice, states=states)
    if task is not None:
        ids, _ = inputs.recall_batch(task, int(sequences), torch.Generator().manual_seed(int(seed)))
        return inputs.ModelBatch(ids, inputs.recall_label(task, seed))
    source = inputs.resolve_text(text_file=text_file, split=split, text=text)
    ids = inputs.token_batch(tokenizer, source, int(tokens), int(sequences), vocab_size=model.config.vocab_size)
    return inputs.ModelBatch(ids, source.label, source.warning)
