"""Issue 44 (and issue 41 probe row 8): a saved prune says in its own model card how to load it, the card's front
matter parses and states the plan, heads, state bytes and the held-out measurement with its settings; `export`
gives a folder saved before this its code without touching it; an unknown `pruned_*` type is one sentence that
says what to do."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from analysis.cli.main import main
from family_cases import logits

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def front_matter(readme: Path) -> dict:
    text = readme.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def pruned_dir(lm_dir, tmp_path_factory):
    """A real CLI prune of the tiny language model: per-layer key dims and heads, measured on the test split."""
    out = tmp_path_factory.mktemp("card") / "pruned"
    assert main(["prune", str(lm_dir), "--strategy", "l1", "--ratios", "0.5,0.25", "--heads", "0.5",
                 "--head-strategy", "random", "--out", str(out), "--eval-tokens", "256", "--quiet"]) == 0
    return out


def test_the_card_says_what_was_pruned_and_how_to_load(pruned_dir):
    pruning = json.loads((pruned_dir / "pruning.json").read_text())
    front = front_matter(pruned_dir / "README.md")
    p = front["state_rank_pruning"]
    assert front["library_name"] == "transformers" and "pruned" in front["tags"]
    assert p["key_dims_after"] == pruning["head_k_dims"] and p["key_dims_before"] == pruning["original_head_k_dims"]
    assert p["heads"]["value_heads_after"] == [c[1] for c in pruning["heads"]["head_counts"]]
    after = pruning["evaluation"]["measured_after"]
    assert p["state_bytes_per_sequence_after"] == after["state_bytes_per_sequence"] < \
        p["state_bytes_per_sequence_before"]
    measured = p["measured"][0]
    assert measured["split"] == "test" and measured["role"].startswith("held-out")
    assert measured["after"] == pytest.approx(after["perplexity"]["perplexity"], rel=1e-4)
    assert (measured["context"], measured["tokens"], measured["device"], measured["dtype"]) == (
        after["perplexity"]["context"], after["perplexity"]["tokens"], "cpu", "float32")
    text = (pruned_dir / "README.md").read_text()
    assert "trust_remote_code=True" in text and "analysis.ready()" in text and "export" in text


def test_a_base_cards_licence_is_inherited(tmp_path):
    from analysis.io.pruned_card import base_licence
    (tmp_path / "README.md").write_text("---\nlicense: apache-2.0\n---\n# base\n")
    assert base_licence(tmp_path) == "apache-2.0"
    assert base_licence(tmp_path / "missing") is None


def test_export_gives_an_old_folder_its_code_and_never_touches_it(pruned_dir, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(pruned_dir, old)
    for name in [p.name for p in old.glob("*.py")] + ["README.md", ".state-rank-model.json"]:
        (old / name).unlink(missing_ok=True)
    config = json.loads((old / "config.json").read_text())
    config.pop("auto_map"), config.pop("pruned_layout")
    (old / "config.json").write_text(json.dumps(config))
    before = digest(old)
    assert main(["export", str(old), "--out", str(tmp_path / "new")]) == 0
    assert digest(old) == before
    new = tmp_path / "new"
    assert sorted(p.name.split("_")[0] for p in new.glob("*.py")) == ["configuration", "modeling"]
    assert json.loads((new / "config.json").read_text())["pruned_layout"] == \
        json.loads((pruned_dir / "config.json").read_text())["pruned_layout"]
    assert (new / "model.safetensors").read_bytes() == (old / "model.safetensors").read_bytes()
    assert "trust_remote_code=True" in (new / "README.md").read_text()
    from analysis.models.load import load_model
    ids = torch.randint(1, 500, (1, 9), generator=torch.Generator().manual_seed(0))
    assert torch.equal(logits(load_model(str(new), device="cpu"), ids), logits(load_model(str(old), device="cpu"), ids))
    capsys.readouterr()
    assert main(["export", str(old), "--out", str(old / "inside")]) == 2
    assert "never changes the folder it reads" in capsys.readouterr().err
    assert digest(old) == before


def test_export_of_a_family_type_is_one_sentence(lm_dir, tmp_path, capsys):
    assert main(["export", str(lm_dir), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "the family's own type" in err and err.count("\n") == 1 and not (tmp_path / "x").exists()


def test_an_unknown_pruned_type_says_how_to_load_it(lm_dir, tmp_path, capsys):
    folder = tmp_path / "future"
    shutil.copytree(lm_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "pruned_some_future_family"
    (folder / "config.json").write_text(json.dumps(config))
    assert main(["ppl", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "trust_remote_code=True" in err and "export" in err and "Traceback" not in err and err.count("\n") == 1
