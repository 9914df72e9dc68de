"""Loads a local task's JSONL (beside this file) for lm-evaluation-harness: no network, no dataset cache.

Each task YAML here names it with `custom_dataset: !function local_data.load`; every JSONL line is one doc with
its split ("test" or "validation", the few-shot pool). Built by build_tasks.py.
"""
import json
from pathlib import Path

import datasets

HERE = Path(__file__).resolve().parent


def load(data_file, **_metadata):
    splits = {}
    with open(HERE / data_file, encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            splits.setdefault(doc.pop("split"), []).append(doc)
    return datasets.DatasetDict({name: datasets.Dataset.from_list(docs, split=name) for name, docs in splits.items()})
