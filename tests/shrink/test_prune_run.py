"""Issue 43, item 1: one PruneRun, one pruning.json (schema_version 2), one reader of every file saved before.

The files in pruning_files/ were written by the code before schema_version 2 (the commit before it), with:
- cli-text: `prune deltanet-small --strategy l1 --ratio 0.5 --heads 0.5 --head-strategy random --eval-tokens 256
  --eval-context 128 --recover-steps 2 --recover-method qk --recover-batch 2 --recover-seq-len 64
  --recover-eval-every 1 --recover-eval-tokens 256` (measured_* and perplexity_* under "evaluation");
- cli-recall: `prune deltanet-recall --strategy l1 --ratio 0.5 --recall-sequences 16` (recall accuracy);
- page: what the Prune page's Save wrote (ui/prune/prune_save.py then: the table's columns "before", "after
  pruning", "after recovery" under "evaluation", and "saved_model"), for an l1 + random-heads prune recovered 2 qk
  steps, through the core calls the page made;
and the oldest CLI files (perplexity_* only) are the goldens' saved_pruning_json (tests/golden/).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.errors import AnalysisError
from analysis.runs.report_data import recorded_effect
from analysis.shrink import plan_points, prune_run
from golden.golden_compare import numbers

FILES = Path(__file__).resolve().parent / "pruning_files"
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def old(name: str) -> dict:
    if name == "cli-oldest":
        return json.loads((GOLDEN / "deltanet-small--prune-l1.json").read_text())["saved_pruning_json"]
    return json.loads((FILES / f"{name}-before-v2.json").read_text())


@pytest.mark.parametrize("name", ["cli-text", "cli-recall", "page", "cli-oldest"])
def test_every_earlier_pruning_json_reads_as_one_prune_run(name):
    record = old(name)
    run = prune_run.from_record(record)
    assert run.plan["head_k_dims"] == record["head_k_dims"] and run.source == record.get("source", "")
    recovered = name in ("cli-text", "page")
    assert set(run.measured) == {"before", "after"} | ({"recovered"} if recovered else set())
    assert run.saved_model == ("recovered" if recovered else "pruned")
    metric = "recall" if name == "cli-recall" else "perplexity"
    rows = recorded_effect(run)  # the report's table: one row per column, whichever front end saved it
    assert [r["column"] for r in rows] == ["before", "after pruning"] + (["after recovery"] if recovered else [])
    ev = record["evaluation"]
    kept = ev.get("after recovery") or ev.get("measured_recovered") if recovered else \
        ev.get("after pruning") or ev.get("measured_after") or {"perplexity": ev["perplexity_after"]}
    assert rows[-1][metric] == kept[metric]
    if recovered:
        assert run.recovery["kept_step"] == 2 and run.plan["heads"]["strategy"] == "random"
    if name != "cli-oldest":  # the oldest files carry no state bytes: no point on the history chart
        point = plan_points.from_pruning(run, "saved")
        assert point["head_k_dims"] == record["head_k_dims"] and point["state_bytes"] == \
            kept["state_bytes_per_sequence"]


@pytest.mark.parametrize("name", ["cli-text", "cli-recall", "page", "cli-oldest"])
def test_a_file_saved_before_writes_again_as_schema_2_with_nothing_lost(name):
    """Read, then metadata(): version 2, stable under a second round trip; a CLI file keeps every number at the
    path it had (what its users parse); the page's columns move to measured_* with all their numbers."""
    record = old(name)
    again = prune_run.from_record(record).metadata()
    assert again["schema_version"] == prune_run.SCHEMA_VERSION
    assert prune_run.from_record(json.loads(json.dumps(again))).metadata() == json.loads(json.dumps(again))
    new = numbers(json.loads(json.dumps(again)))
    if name == "page":
        moved = {f".evaluation.{c}": f".evaluation.measured_{s}" for s, c in prune_run.COLUMNS.items()}
        for path, value in numbers(record).items():
            prefix = next((p for p in moved if path.startswith(p + ".")), None)
            assert new[moved[prefix] + path[len(prefix):] if prefix else path] == value, path
    else:
        assert {p: v for p, v in numbers(record).items() if new.get(p, object()) != v} == {}


def test_the_card_of_any_earlier_file_states_the_held_out_measurement(tmp_path):
    from analysis.io import pruned_card
    for name in ("cli-text", "page"):
        front = pruned_card.front_matter({"model_type": "pruned_delta_net"},
                                         prune_run.from_record(old(name)).metadata())["state_rank_pruning"]
        [row] = front["measured"]
        assert row["role"].startswith("held-out") and row["split"] == "test" and "after_recovery" in row
        assert front["heads"]["strategy"] == "random"


def test_read_refuses_a_newer_schema_and_a_non_prune_in_one_sentence(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "pruning.json").write_text(json.dumps({**old("cli-text"), "schema_version": 99}))
    with pytest.raises(AnalysisError, match="schema_version 99, newer than this tool's 2; update"):
        prune_run.read(folder)
    (folder / "pruning.json").write_text(json.dumps({"note": "mine"}))
    with pytest.raises(AnalysisError, match="does not describe a pruning"):
        prune_run.read(folder)
    (folder / "pruning.json").write_text(json.dumps(old("page")))
    assert prune_run.read(folder).saved_model == "recovered"


def test_an_unchanged_plan_is_one_sentence_for_keys_and_for_heads():
    from family_cases.text_lm import build_tiny
    from analysis.models.key_plan import key_dims, plan_key_dims
    from analysis.shrink.heads.prune import value_heads
    model = build_tiny("delta_net")
    dims = plan_key_dims(model, ratio=0.2, round_to=32)
    assert "keeps every key channel after rounding" in prune_run.unchanged(model, dims, 0.2, None, 32)
    assert "keeps every head" in prune_run.unchanged(model, key_dims(model), 0.0, None, None, value_heads(model))
    assert prune_run.unchanged(model, plan_key_dims(model, ratio=0.5), 0.5) is None
