"""Issue 12: moving the family knowledge into adapters changes no number.

The goldens in tests/golden/ were written by the code BEFORE the adapter migration (commit "Golden outputs
of the pre-adapter code"), from the same commands this test runs: `rank`, `importance` and `prune` JSON of
the bundled DeltaNet and Gated DeltaNet samples through the CLI, and, for the recall model (which the CLI
could not feed then), the same core calls on its own recall sequences. Every number must be reproduced
exactly (floats compared with ==); the pruned weights are compared by a SHA-256 of their bytes. Strings
(labels, paths) are not compared, so rewording a label is not a migration error; keys added later are
allowed, keys that vanish are not.

Marked slow (about 3 minutes on a quiet CPU; `make test` runs it). Regenerate ONLY when a number is meant to change, with a reason in the commit:
    GOLDEN_REGENERATE=1 .venv/bin/python -m pytest tests/test_migration_golden.py
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from analysis.cli import main

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("GOLDEN_REGENERATE") == "1"

CALIB = ["--calib-sequences", "2", "--calib-tokens", "64"]
CLI_CASES = {
    # name: (argv without --json, model)
    "rank": ["rank", "{m}", "--tokens", "48", "--batch", "2"],
    "importance": ["importance", "{m}", "--ratio", "0.5", "--strategies", "random,l1,wanda,grad,pca,drrqr", *CALIB],
    "prune-l1": ["prune", "{m}", "--strategy", "l1", "--ratio", "0.5", "--eval-tokens", "256", "--out", "{out}"],
    "prune-wanda-layers": ["prune", "{m}", "--strategy", "wanda", "--ratios", "{ratios}", "--eval-tokens", "256",
                           "--out", "{out}", *CALIB],
    "prune-pca": ["prune", "{m}", "--strategy", "pca", "--ratio", "0.5", "--eval-tokens", "256", "--out", "{out}",
                  *CALIB],
}
TEXT_SAMPLES = {"deltanet-small": "0.25,0.5,0.75,0.5", "gated-deltanet-small": "0.5,0.25,0.5,0.75"}


@pytest.fixture(autouse=True)
def svd_route(monkeypatch):
    """The goldens predate issue 14's float64-Gram route for float32 states (same math, other rounding): the
    migration is compared on the svdvals route they were written with; tests/test_rank.py checks the Gram one."""
    import analysis.rank as rank
    original = rank.singular_values
    monkeypatch.setattr(rank, "singular_values", lambda S, method, finite=None: original(S, "svd", finite))


def weights_digest(path: Path) -> str:
    """SHA-256 over the saved tensors (name, dtype, shape, bytes), in name order."""
    from safetensors.torch import load_file
    tensors = {}
    for file in sorted(path.glob("*.safetensors")):
        tensors.update(load_file(file))
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def numbers(obj, path: str = "") -> dict:
    """{json path: value} for every number, bool and null of a JSON document (strings left out)."""
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in numbers(val, f"{path}.{key}").items()}
    if isinstance(obj, list):
        return {k: v for i, val in enumerate(obj) for k, v in numbers(val, f"{path}[{i}]").items()}
    return {} if isinstance(obj, str) else {path: obj}


def check_or_store(name: str, document: dict) -> None:
    file = GOLDEN / f"{name}.json"
    if REGENERATE:
        GOLDEN.mkdir(exist_ok=True)
        file.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
        return
    expected = numbers(json.loads(file.read_text()))
    got = numbers(json.loads(json.dumps(document)))  # the same JSON round trip the golden went through
    missing = sorted(set(expected) - set(got))
    assert not missing, f"{name}: {len(missing)} numbers gone, e.g. {missing[:5]}"
    changed = [(k, expected[k], got[k]) for k in expected if expected[k] != got[k]]
    assert not changed, f"{name}: {len(changed)} of {len(expected)} numbers changed, e.g. {changed[:5]}"
    if "weights_sha256" in document:
        assert document["weights_sha256"] == json.loads(file.read_text())["weights_sha256"], name


def run_cli(argv: list[str], tmp_path: Path) -> dict:
    out_json = tmp_path / "out.json"
    assert main([*argv, "--device", "cpu", "--json", str(out_json)]) == 0, argv
    return json.loads(out_json.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CLI_CASES))
@pytest.mark.parametrize("sample", list(TEXT_SAMPLES))
def test_text_samples_reproduce_the_pre_adapter_json(sample, case, tmp_path):
    out = tmp_path / "pruned"
    argv = [a.format(m=sample, out=out, ratios=TEXT_SAMPLES[sample]) for a in CLI_CASES[case]]
    document = run_cli(argv, tmp_path)
    for variable in ("source", "out"):
        document.pop(variable, None)
    if case.startswith("prune"):
        metadata = json.loads((out / "pruning.json").read_text())
        metadata.pop("source", None)
        document["saved_pruning_json"] = metadata
        document["weights_sha256"] = weights_digest(out)
    check_or_store(f"{sample}--{case}", document)


@pytest.mark.slow
def test_recall_sample_reproduces_the_pre_adapter_numbers(tmp_path):
    """The recall model through the core on its own recall sequences: rank, importance, an l1 and a wanda prune."""
    from analysis import models
    from analysis.calibration import calibrate
    from analysis.importance import importance_report
    from analysis.prune import plan_key_dims, prune, save_model
    from analysis.recall import recall_batch
    from analysis.recall_eval import task_of
    from analysis.report import rank_report
    from analysis.states import collect_states

    model = models.load_model("deltanet-recall", device="cpu")
    task = task_of(model)
    ids, _ = recall_batch(task, 4, torch.Generator().manual_seed(0))
    document = {"rank": rank_report(collect_states(model, ids), {"stride": 1})}
    calib = calibrate(model, None, input_ids=ids)
    document["importance"] = importance_report(model, None, ["random", "l1", "wanda", "grad", "pca", "drrqr"], 0.5,
                                               calib=calib)
    for strategy, kwargs in (("l1", {"ratio": 0.5}), ("wanda", {"ratios": [0.25, 0.75]})):
        result = prune(model, strategy, plan_key_dims(model, **kwargs), calib)
        save_model(result.model, tmp_path / strategy)
        logits = result.model(ids).logits
        document[f"prune-{strategy}"] = {
            "dims": result.dims, "kept": [s.indices.tolist() for s in result.selections],
            "logits_sum": float(logits.double().sum()), "logits_abs_sum": float(logits.double().abs().sum()),
            "weights_sha256": weights_digest(tmp_path / strategy)}
    check_or_store("deltanet-recall--core", document)
    if not REGENERATE:
        golden = json.loads((GOLDEN / "deltanet-recall--core.json").read_text())
        for strategy in ("l1", "wanda"):
            assert document[f"prune-{strategy}"]["weights_sha256"] == golden[f"prune-{strategy}"]["weights_sha256"]
