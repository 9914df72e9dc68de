"""Multi-query associative recall (MQAR): the retrieval task the rank/noise theory speaks about.

A sequence stores `n_pairs` key→value pairs, then asks for some of them again:
    k1 v1 k2 v2 … kn vn | kq1 vq1 kq2 vq2 …
The model is scored on predicting each queried value right after its key. Keys and values use
disjoint token ranges; everything is generated from a seeded torch.Generator.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from analysis.errors import AnalysisError


@dataclass(frozen=True)
class RecallTask:
    n_keys: int = 128          # key vocabulary (token ids 1..n_keys)
    n_values: int = 128        # value vocabulary (ids n_keys+1 .. n_keys+n_values)
    n_pairs: int = 16
    n_queries: int = 16

    @property
    def vocab_size(self) -> int:
        return 1 + self.n_keys + self.n_values  # id 0 is unused padding

    @property
    def seq_len(self) -> int:
        return 2 * (self.n_pairs + self.n_queries)


def recall_batch(task: RecallTask, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids [B, L], labels [B, L]) with labels −100 except at the queried values."""
    if task.n_pairs > task.n_keys or task.n_queries > task.n_pairs:
        raise AnalysisError(f"A recall task needs n_queries ≤ n_pairs ≤ n_keys; got {task}.")
    keys = torch.argsort(torch.rand(batch, task.n_keys, generator=generator), dim=1)[:, :task.n_pairs] + 1
    values = torch.randint(0, task.n_values, (batch, task.n_pairs), generator=generator) + 1 + task.n_keys
    asked = torch.argsort(torch.rand(batch, task.n_pairs, generator=generator), dim=1)[:, :task.n_queries]
    q_keys, q_values = keys.gather(1, asked), values.gather(1, asked)
    ids = torch.cat([torch.stack([keys, values], -1).flatten(1), torch.stack([q_keys, q_values], -1).flatten(1)], 1)
    labels = torch.full_like(ids, -100)
    start = 2 * task.n_pairs
    labels[:, start + 1::2] = ids[:, start + 1::2]
    return ids, labels


@torch.no_grad()
def recall_accuracy(model, task: RecallTask, n_sequences: int = 256, seed: int = 1234, batch: int = 64) -> float:
    """Fraction of queried values predicted exactly (argmax) after their key."""
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    correct = total = 0
    for start in range(0, n_sequences, batch):
        ids, labels = recall_batch(task, min(batch, n_sequences - start), gen)
        logits = model(ids.to(device), use_cache=False).logits[:, :-1]
        target = labels[:, 1:].to(device)
        mask = target != -100
        correct += int((logits.argmax(-1)[mask] == target[mask]).sum())
        total += int(mask.sum())
    return correct / total


def task_of(model) -> RecallTask:
    """The task a recall model was trained on, from training.json beside its weights."""
    path = Path(getattr(model, "analysis_source", "")) / "training.json"
    if not path.exists():
        raise AnalysisError("This model has no training.json describing a recall task; "
                            "use a recall-trained model such as deltanet-recall.")
    cfg = json.loads(path.read_text())
    if cfg.get("task") != "recall":
        raise AnalysisError("This model was trained for language modelling, not associative recall; "
                            "use --split test/validation/wiki instead.")
    return RecallTask(n_keys=cfg["recall_keys"], n_values=cfg["recall_keys"], n_pairs=cfg["recall_pairs"],
                      n_queries=cfg["recall_pairs"])
