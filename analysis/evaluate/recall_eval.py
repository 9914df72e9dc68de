"""Recall accuracy of a recall-trained model by number of stored pairs (its card and `ppl --split recall`)."""
from __future__ import annotations

from analysis.data.recall import RecallTask, recall_accuracy, task_of


RECALL_SEED = 1234  # the test sequences a recall model is scored on (the sensitivity map uses its own seed)


def recall_report(model, pairs=(4, 8, 16, 24, 32, 48, 64), n_sequences: int = 256, seed: int = RECALL_SEED) -> dict:
    trained = task_of(model)
    rows = []
    for n in pairs:
        if n > trained.n_keys:
            continue
        task = RecallTask(trained.n_keys, trained.n_values, n, n)
        rows.append({"pairs": n, "queries": n, "accuracy": recall_accuracy(model, task, n_sequences, seed)})
    return {"task": "multi-query associative recall", "trained_pairs": trained.n_pairs, "keys": trained.n_keys,
            "sequences_per_point": n_sequences, "seed": seed, "by_pairs": rows}
