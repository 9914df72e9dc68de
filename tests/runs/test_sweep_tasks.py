"""`sweep --tasks` (issue 33): lm-evaluation-harness accuracy beside perplexity at every point, cached in the point
cache under a key that holds the tasks, their settings and the hash of their data."""
import json

import pytest

from analysis.cli.main import main
from analysis.data import corpus as data
from analysis.evaluate import harness_tasks
from analysis.evaluate.harness import TaskSettings
from analysis.runs import sweep as sweep_mod
from analysis.evaluate.measure import Evaluation
from family_cases.text_lm import build_tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread", "sweep_cache")

SMALL = dict(strategies=["l1"], ratios=[0.5], evaluation=Evaluation(context=64, max_tokens=128, latency=False))
TASKS = TaskSettings(("shakespeare_word_order",), limit=2, batch_size=4)
_with = lambda tasks: {**SMALL, "evaluation": Evaluation(context=64, max_tokens=128, latency=False,  # noqa: E731
                                                          tasks=tasks)}


def test_every_point_carries_the_tasks_accuracy_and_is_served_from_the_cache_only_for_the_same_tasks_and_data(
        monkeypatch):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = list(sweep_mod.sweep(model, tok, **_with(TASKS)))
    assert [p["strategy"] for p in first] == ["unpruned", "l1"] and not any(p["cached"] for p in first)
    for point in first:
        row = point["tasks"]["shakespeare_word_order"]
        assert row["docs"] == 2 and row["metric"] == "acc" and 0 <= row["accuracy"] <= 1
        assert row["accuracy_stderr"] is not None and row["chance"] == 0.25
        assert point["harness"].startswith("lm-evaluation-harness ")
    again = list(sweep_mod.sweep(model, tok, **_with(TASKS)))
    assert all(p["cached"] for p in again) and [p["tasks"] for p in again] == [p["tasks"] for p in first]
    other = list(sweep_mod.sweep(model, tok, **_with(TaskSettings(TASKS.tasks, limit=3, batch_size=4))))
    assert not any(p["cached"] for p in other) and other[0]["tasks"]["shakespeare_word_order"]["docs"] == 3
    plain = list(sweep_mod.sweep(model, tok, **SMALL))  # without tasks: its own entries, no task fields
    assert not any(p["cached"] for p in plain) and "tasks" not in plain[0]
    monkeypatch.setattr(harness_tasks, "docs_hash", lambda task, shots: "other data")
    changed = list(sweep_mod.sweep(model, tok, **_with(TASKS)))
    assert not any(p["cached"] for p in changed)


def test_sweep_cli_prints_and_writes_the_accuracy_of_each_point(tmp_path, capsys, lm_dir):
    out = tmp_path / "sweep.json"
    assert main(["sweep", str(lm_dir), "--strategies", "random", "--ratios", "0.5", "--eval-tokens", "128",
                 "--context", "64", "--no-latency", "--tasks", "shakespeare_word_order", "--task-limit", "2",
                 "--json", str(out), "--quiet"]) == 0
    results = json.loads(out.read_text())["results"]
    assert [r["tasks"]["shakespeare_word_order"]["docs"] for r in results] == [2, 2]
    lines = [line for line in capsys.readouterr().out.splitlines() if "shakespeare_word_order acc" in line]
    assert len(lines) == 2 and " ± " in lines[1]  # one line per point, accuracy ± the harness's standard error
    assert main(["sweep", str(lm_dir), "--task-limit", "3", "--quiet"]) == 2  # a task option without --tasks
    assert "apply to --tasks" in capsys.readouterr().err
