"""Tiny saved models for the dashboard tests (a DeltaNet LM and a recall model), from the family-case factory."""
from __future__ import annotations

import json
from pathlib import Path

from family_cases.text_lm import build_tiny

RECALL = dict(recall_keys=16, recall_pairs=4)  # vocab 1 + 16 + 16


def save_tiny_lm(path: Path, kind: str = "delta_net") -> Path:
    build_tiny(kind).save_pretrained(path)
    return path


def save_pruned_sample(sample: Path, out: Path, dims: list[int], strategy: str = "l1"):
    """A bundled sample pruned by the core (a data-free strategy) and saved with its tokenizer: (result, folder)."""
    from analysis.models import load as models
    from analysis.shrink.prune import prune
    from analysis.io.model_dir import save_model
    model = models.load_model(str(sample), "cpu", "float32")
    result = prune(model, strategy, dims)
    result.model.analysis_source = str(sample)
    return result, save_model(result.model, out, tokenizer=models.load_tokenizer(model))


def save_tiny_recall(path: Path) -> Path:
    """A random-init recall model: training.json marks the task, and there is no tokenizer."""
    build_tiny("delta_net", vocab_size=1 + 2 * RECALL["recall_keys"]).save_pretrained(path)
    (path / "training.json").write_text(json.dumps({"task": "recall", **RECALL}))
    return path
