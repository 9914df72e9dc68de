"""Recall accuracy of a recall-trained model by number of stored pairs (its card and `ppl --split recall`)."""
from __future__ import annotations

import json
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.data.recall import RecallTask, recall_accuracy


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


def recall_report(model, pairs=(4, 8, 16, 24, 32, 48, 64), n_sequences: int = 256, seed: int = 1234) -> dict:
    trained = task_of(model)
    rows = []
    for n in pairs:
        if n > trained.n_keys:
            continue
        task = RecallTask(trained.n_keys, trained.n_values, n, n)
        rows.append({"pairs": n, "queries": n, "accuracy": recall_accuracy(model, task, n_sequences, seed)})
    return {"task": "multi-query associative recall", "trained_pairs": trained.n_pairs, "keys": trained.n_keys,
            "sequences_per_point": n_sequences, "seed": seed, "by_pairs": rows}
