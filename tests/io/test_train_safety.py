"""Issue 11 item 2: `train --resume` never unpickles; `train` never deletes what it did not write."""
import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file

from analysis.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MARKER = ".state-rank-model.json"  # analysis.io.writes.MARKER, spelled out so this file also runs on older code
TINY = ["--task", "recall", "--hidden-size", "32", "--layers", "1", "--heads", "1", "--head-dim", "16",
        "--batch", "2", "--warmup", "1", "--eval-every", "2", "--checkpoint-every", "2", "--recall-pairs", "2",
        "--recall-keys", "8", "--device", "cpu"]


def train(tmp: Path, name: str, steps: int, *extra) -> int:
    return main(["train", "--out", str(tmp / name / "final"), "--work", str(tmp / name / "work"),
                 "--steps", str(steps), *TINY, *extra])


def test_resume_from_the_safetensors_state_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert train(tmp_path, "straight", 4) == 0
    assert train(tmp_path, "halves", 2) == 0
    checkpoint = tmp_path / "halves" / "work" / "checkpoint"
    assert sorted(p.name for p in checkpoint.glob("trainer_state*")) == ["trainer_state.json",
                                                                           "trainer_state.safetensors"]
    assert train(tmp_path, "halves", 4, "--resume") == 0   # also replaces its own earlier final model
    a = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    b = load_file(tmp_path / "halves" / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "halves" / "final" / "training.json").read_text())["steps_done"] == 4


class RunsCode:
    """Unpickling this object runs code (what a crafted trainer_state.pt would do)."""

    def __init__(self, sentinel: str):
        self.sentinel = sentinel

    def __reduce__(self):
        return exec, (f"open({self.sentinel!r}, 'w').write('code ran')",)


def test_a_crafted_pickle_in_the_trainer_state_is_never_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert train(tmp_path, "run", 2) == 0
    checkpoint = tmp_path / "run" / "work" / "checkpoint"
    for name in ("trainer_state.safetensors", "trainer_state.json"):
        (checkpoint / name).unlink(missing_ok=True)
    sentinel = tmp_path / "code-ran"
    torch.save({"optimizer": RunsCode(str(sentinel)), "step": 2, "generator": torch.zeros(1),
                "torch_rng": torch.zeros(1)}, checkpoint / "trainer_state.pt")
    if (checkpoint / MARKER).exists():  # an attacker can edit the marker too
        marker = json.loads((checkpoint / MARKER).read_text())
        marker["files"] = sorted(set(marker["files"]) - {"trainer_state.safetensors", "trainer_state.json"}
                                 | {"trainer_state.pt"})
        (checkpoint / MARKER).write_text(json.dumps(marker))
    capsys.readouterr()
    try:
        code = train(tmp_path, "run", 4, "--resume")
    except Exception as exc:  # (the old code unpickled it, ran it, then crashed on the state)
        code = exc
    assert not sentinel.exists(), "the pickled code ran"
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "pickled code is never run" in err, err


def test_a_damaged_safetensors_trainer_state_is_one_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert train(tmp_path, "run", 2) == 0
    (tmp_path / "run" / "work" / "checkpoint" / "trainer_state.safetensors").write_bytes(b"\x00" * 16)
    capsys.readouterr()
    assert train(tmp_path, "run", 4, "--resume") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "cannot be read" in err and err.count("\n") == 1, err


def test_train_keeps_a_tmp_sibling_and_a_foreign_out_it_did_not_write(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sibling = tmp_path / "run" / "final.tmp"
    sibling.mkdir(parents=True)
    (sibling / "keep.txt").write_text("not the tool's")
    assert train(tmp_path, "run", 2) == 0
    assert (sibling / "keep.txt").read_text() == "not the tool's"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["final", "final.tmp", "work"]

    user = tmp_path / "user" / "final"          # --resume with an --out the tool did not write
    user.mkdir(parents=True)
    (user / "thesis.tex").write_text("years of work")
    capsys.readouterr()
    assert train(tmp_path, "user", 2, "--resume") == 2
    err = capsys.readouterr().err
    assert "was not written by this tool" in err and err.count("\n") == 1, err
    assert (user / "thesis.tex").read_text() == "years of work"
    assert not (tmp_path / "user" / "work").exists()   # refused before any training


def test_no_torch_load_without_weights_only_in_the_tree():
    """Every torch.load call in the project's Python files passes weights_only=True (no unpickling)."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        if {".venv", ".git", "site-packages"} & set(path.relative_to(ROOT).parts):
            continue
        text = path.read_text(errors="replace")
        for match in re.finditer(r"torch\.load\(|weights_only\s*=\s*False|pickle\.loads?\(", text):
            depth, end = 0, match.end() - 1
            for end in range(match.end() - 1, len(text)):   # the call's full argument list
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            call = text[match.start():end + 1]
            if not match.group().startswith("torch.load") or not re.search(r"weights_only\s*=\s*True", call):
                offenders.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {call}")
    assert not offenders, "\n".join(offenders)


# ---- issue 25: resume recovers an interrupted checkpoint swap, says where it starts, refuses contradictions ----

def test_resume_always_says_where_it_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert train(tmp_path, "empty", 2, "--resume") == 0      # an empty --work: said, not silent
    assert f"no checkpoint in {tmp_path / 'empty' / 'work'}: starting at step 0" in capsys.readouterr().out
    assert train(tmp_path, "empty", 4, "--resume", "--json", "-") == 0
    err = capsys.readouterr().err
    assert f"resumed from step 2 (checkpoint {tmp_path / 'empty' / 'work' / 'checkpoint'})" in err, err


def test_resume_finishes_a_checkpoint_left_complete_under_its_temporary_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert train(tmp_path, "run", 2) == 0
    work = tmp_path / "run" / "work"
    (work / "checkpoint").rename(work / ".checkpoint.k1ll3d00.partial")   # killed between fill and rename
    capsys.readouterr()
    assert train(tmp_path, "run", 4, "--resume") == 0
    out, err = capsys.readouterr()
    assert "resumed from step 2" in out and "recovered the complete checkpoint of step 2" in err, (out, err)
    assert sorted(p.name for p in work.iterdir()) == ["checkpoint"]


def test_resume_refuses_settings_that_contradict_the_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert train(tmp_path, "run", 2) == 0
    before = (tmp_path / "run" / "work" / "checkpoint" / "model.safetensors").read_bytes()
    for flag, value in [("--hidden-size", "48"), ("--layers", "2"), ("--heads", "2"), ("--arch", "gated_deltanet")]:
        capsys.readouterr()
        assert main(["train", "--out", str(tmp_path / "run" / "final"), "--work", str(tmp_path / "run" / "work"),
                     "--steps", "4", *TINY, flag, value, "--resume"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {flag} {value} contradicts the checkpoint") and err.count("\n") == 1, err
    assert (tmp_path / "run" / "work" / "checkpoint" / "model.safetensors").read_bytes() == before


def test_resume_never_opens_a_pickled_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert train(tmp_path, "run", 2) == 0
    checkpoint = tmp_path / "run" / "work" / "checkpoint"
    weights = load_file(checkpoint / "model.safetensors")
    (checkpoint / "model.safetensors").unlink()
    torch.save(weights, checkpoint / "pytorch_model.bin")
    marker = json.loads((checkpoint / MARKER).read_text())     # as an attacker would, so only the loader stands
    marker["files"] = sorted(set(marker["files"]) - {"model.safetensors"} | {"pytorch_model.bin"})
    (checkpoint / MARKER).write_text(json.dumps(marker))
    opened = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: opened.append(a) or (_ for _ in ()).throw(AssertionError))
    capsys.readouterr()
    assert train(tmp_path, "run", 4, "--resume") == 2
    err = capsys.readouterr().err
    assert opened == [] and err.count("\n") == 1 and "pickled .bin files are never loaded" in err, err

