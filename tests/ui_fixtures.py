"""Tiny saved models for the dashboard tests (a DeltaNet LM and a recall model), from the family-case factory."""
from __future__ import annotations

import json
from pathlib import Path

from family_cases.text_lm import build_tiny

RECALL = dict(recall_keys=16, recall_pairs=4)  # vocab 1 + 16 + 16


def save_tiny_lm(path: Path, kind: str = "delta_net") -> Path:
    build_tiny(kind).save_pretrained(path)
    return path


def save_tiny_recall(path: Path) -> Path:
    """A random-init recall model: training.json marks the task, and there is no tokenizer."""
    build_tiny("delta_net", vocab_size=1 + 2 * RECALL["recall_keys"]).save_pretrained(path)
    (path / "training.json").write_text(json.dumps({"task": "recall", **RECALL}))
    return path
