"""Issue 32: `prune --heads / --head-counts --head-strategy` and `heads` on the command line.

Bad input is one sentence, exit 2, before any work and with nothing written (the --out folder never appears):
dropping every head of a layer, a count above the layer's heads, counts for the wrong number of layers, a count a
grouped-value model cannot express, counts given per block (a softmax-attention block has no heads to prune),
both --heads and --head-counts, an unknown head strategy. A good head prune writes the saved model, its
pruning.json (kept heads) and JSON whose numbers match the saved model.
"""
from __future__ import annotations

import json

import pytest

from analysis.cli.main import main
from analysis.models.load import REPO_ROOT

QWEN = str(REPO_ROOT / "sample_models" / "qwen35-hybrid-small")   # 6 GDN layers (2 key, 4 value heads) + 2 softmax


@pytest.mark.parametrize("model, flags, said", [
    ("tiny", ["--head-counts", "0,2"], "drops every head"),
    ("tiny", ["--head-counts", "5,2"], "has 2 heads, fewer than the 5"),
    ("tiny", ["--head-counts", "1,1,1"], "Got 3 head counts for a model with 2 linear-attention layers"),
    ("qwen", ["--head-counts", "3,4,4,4,4,4"], "cannot be expressed"),
    ("qwen", ["--head-counts", "2,2,2,2,2,2,2,2"], "softmax attention"),
    ("tiny", ["--heads", "0.5", "--head-counts", "1,1"], "not both"),
    ("tiny", ["--heads", "0.5", "--head-strategy", "entropy"], "Unknown head strategy"),
    ("tiny", ["--heads", "0.5", "--ratio", "0.5"], "needs a channel strategy"),
])
def test_bad_head_plans_are_one_sentence(lm_dir, tmp_path, capsys, model, flags, said):
    out = tmp_path / "never"
    source = str(lm_dir) if model == "tiny" else QWEN
    assert main(["prune", source, "--device", "cpu", "--out", str(out), "--quiet", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and said in err, err
    assert not out.exists()


def test_head_prune_writes_the_model_and_what_it_kept(lm_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from analysis.models.load import describe
    out, report = tmp_path / "pruned", tmp_path / "prune.json"
    assert main(["prune", str(lm_dir), "--device", "cpu", "--heads", "0.5", "--head-strategy", "random",
                 "--eval-tokens", "260", "--out", str(out), "--quiet", "--json", str(report)]) == 0
    payload = json.loads(report.read_text())
    heads = payload["heads"]
    assert [c[1] for c in heads["head_counts"]] == [1, 1] and heads["strategy"] == "random"
    assert payload["measured_after"]["state_bytes_per_sequence"] * 2 == payload["measured_before"][
        "state_bytes_per_sequence"]
    saved = json.loads((out / "pruning.json").read_text())
    assert saved["heads"]["kept_value_heads"] == heads["kept_value_heads"]
    model = AutoModelForCausalLM.from_pretrained(out)
    assert describe(model).value_heads_per_layer == [1, 1]
    assert describe(model).state_bytes_per_sequence == payload["measured_after"]["state_bytes_per_sequence"]


def test_heads_reports_groups_and_stability(lm_dir, tmp_path):
    out = tmp_path / "heads.json"
    assert main(["heads", str(lm_dir), "--device", "cpu", "--tokens", "24", "--sequences", "2", "--measure", "2",
                 "--quiet", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert len(report["texts"]) == 3 and "random token ids" in report["texts"][2]
    for layer in report["layers"]:
        labels = [[t["group"] for t in h["texts"]] for h in layer["heads"]]
        same = [len(set(x)) == 1 for x in labels]
        assert [h["same_on_all_texts"] for h in layer["heads"]] == same and layer["agreement"] == sum(same) / len(same)
        assert all(set(x) <= {"low", "high"} for x in labels)
        assert all(h["removal"]["sequences"] == 2 for h in layer["heads"])
    assert len(report["notice"]) == len(report["layers"])
    assert len(report["trajectories"][0][0]) == 2 and len(report["trajectories"][0][0][0]) == len(report["positions"])


@pytest.mark.parametrize("texts, said", [("test", "at least two inputs"), ("test,recall", "language model"),
                                         ("test,nowhere.txt", "Unknown input")])
def test_heads_refuses_inputs_it_cannot_read(lm_dir, capsys, texts, said):
    assert main(["heads", str(lm_dir), "--device", "cpu", "--texts", texts, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and said in err, err


@pytest.mark.parametrize("flags, said", [(["--budgets", "0"], "fraction in (0, 1)"),
                                         (["--head-strategies", "entropy"], "Unknown head strategy"),
                                         (["--recover-steps", "1"], "without recovery"),
                                         (["--tasks", "shakespeare_word_order"], "perplexity only")])
def test_budget_sweep_refuses_bad_plans_before_any_work(lm_dir, capsys, sweep_cache, tmp_path, flags, said):
    assert main(["sweep", str(lm_dir), "--device", "cpu", "--axis", "both", "--strategies", "l1", "--quiet",
                 *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and said in err, err
    assert not (tmp_path / "sweeps").exists() or not any((tmp_path / "sweeps").rglob("*"))   # nothing cached
