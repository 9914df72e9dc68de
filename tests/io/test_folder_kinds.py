"""Issue 34: every folder the tool writes has a kind (model, training work, recovery state, card) in its marker,
and no command replaces or deletes a folder of another kind than it writes; every path that may be written or
deleted is checked before any work; no swap journal can make a write or a load hang or fail. Each case is a
defect that the code before this issue had (a model deleted by `--recover-state`, a FIFO hanging every write,
a bundled sample's card rewritten, ...)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import analysis.shrink.prune_workflow as prune_workflow
import analysis.shrink.recovery as recovery
from analysis.cli.main import main
from analysis.data import corpus as data
from analysis.errors import AnalysisError
from analysis.io import swap, writes
from analysis.io.recovery_state import discard_state, finish_state
from analysis.models.load import SAMPLES_DIR, load_model
from analysis.runtime.cancel import Cancelled
from analysis.shrink.recovery import RecoverySettings, recover

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[2]
RECOVER = ["--recover-steps", "2", "--recover-method", "qk", "--recover-batch", "1", "--recover-seq-len", "16",
           "--recover-eval-tokens", "32"]
TINY_RECOVERY = RecoverySettings(method="qk", steps=2, batch=1, seq_len=16, eval_every=1, eval_tokens=32)


def prune_args(model, out, strategy="l1"):
    return ["prune", str(model), "--strategy", strategy, "--ratio", "0.5", "--eval-tokens", "64", "--eval-context",
            "32", "--device", "cpu", "--quiet", "--out", str(out)]


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for child in sorted(path.rglob("*")) if path.is_dir() else [path]:
        h.update(str(child.relative_to(path) if path.is_dir() else child.name).encode())
        if child.is_file() and not child.is_symlink():
            h.update(child.read_bytes())
    return h.hexdigest()


def cli(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory, tiny_dirs):
    """A pruned model this tool saved earlier (the folder a user would lose)."""
    out = tmp_path_factory.mktemp("earlier") / "old-model"
    assert main(prune_args(tiny_dirs["delta_net"], out)) == 0
    return out


@pytest.fixture
def old_model(saved_model, tmp_path):
    copy = tmp_path / "old-model"
    shutil.copytree(saved_model, copy)
    return copy


@pytest.fixture
def prune_calls(monkeypatch):
    """Every prune the CLI starts (a refusal must come before the first)."""
    calls = []
    real = prune_workflow.prune_and_measure

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(prune_workflow, "prune_and_measure", counted)
    return calls


@pytest.fixture(scope="module")
def pruned_pair(tiny_dirs):
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    model = load_model(str(tiny_dirs["delta_net"]), device="cpu")
    return model, prune(model, "l1", plan_key_dims(model, ratio=0.5)).model


# ---- --recover-state ------------------------------------------------------------------------------------------

def test_recover_state_naming_a_saved_model_is_refused_before_any_work(tiny_dirs, old_model, tmp_path, capsys,
                                                                      prune_calls):
    """Before: rc 0, NEW saved, and the earlier model gone (recover() ended with discard_state)."""
    before = digest(old_model)
    code, _, err = cli(capsys, prune_args(tiny_dirs["delta_net"], tmp_path / "new") + RECOVER +
                       ["--recover-state", old_model])
    assert code == 2 and err.count("\n") == 1 and "is a model folder this tool wrote, not a recovery state" in err, err
    assert digest(old_model) == before and not (tmp_path / "new").exists() and prune_calls == []


def test_ctrl_c_never_replaces_a_model_with_the_recovery_state(pruned_pair, old_model):
    """Before: with Ctrl-C at a step, the earlier model was replaced by the recovery state (overwrite=True)."""
    model, pruned = pruned_pair
    before = digest(old_model)
    with pytest.raises(AnalysisError, match="is a model folder this tool wrote, not a recovery state folder"):
        recover(pruned, data.load_tokenizer(), TINY_RECOVERY, cancel=lambda: True, state_dir=old_model)
    assert digest(old_model) == before


def test_a_finished_recovery_never_deletes_a_model_named_as_its_state(pruned_pair, old_model):
    model, pruned = pruned_pair
    before = digest(old_model)
    with pytest.raises(AnalysisError, match="is a model folder this tool wrote, not a recovery state folder"):
        recover(pruned, data.load_tokenizer(), TINY_RECOVERY, state_dir=old_model)  # refused before any step
    finish_state(old_model)  # what a finished recovery calls: anything but a recovery state is left alone
    assert digest(old_model) == before
    with pytest.raises(AnalysisError, match="not a recovery state folder, so it was left alone"):
        discard_state(old_model)
    assert digest(old_model) == before


def _fifo(path):
    os.mkfifo(path)
    return path


def _link(path):
    path.parent.joinpath("elsewhere").mkdir()
    path.symlink_to(path.parent / "elsewhere")
    return path


def _foreign(path):
    path.mkdir()
    (path / "thesis.tex").write_text("years of work")
    return path


def _card_folder(path):
    path.mkdir()
    (path / "card.json").write_text("{}")
    (path / writes.MARKER).write_text(json.dumps({"written_by": writes.WRITER, "kind": "model-card",
                                                  "files": ["card.json"]}))
    return path


@pytest.mark.parametrize("make, says", [
    (_foreign, "was not written by this tool"),
    (lambda p: p.write_text("notes") and p, "is not a folder"),
    (_link, "is a symbolic link"),
    (_fifo, "is not a folder"),
    (_card_folder, "is a model card folder this tool wrote, not a recovery state folder"),
], ids=["foreign folder", "file", "link", "fifo", "card folder"])
def test_a_recover_state_that_is_not_a_new_folder_or_a_state_is_refused_up_front(make, says, tiny_dirs, tmp_path,
                                                                                capsys, prune_calls):
    """Before: a foreign folder was refused only after the whole prune and every recovery step."""
    thing = make(tmp_path / "state")
    before = digest(thing) if not thing.is_fifo() else None
    code, _, err = cli(capsys, prune_args(tiny_dirs["delta_net"], tmp_path / "new") + RECOVER +
                       ["--recover-state", thing])
    assert code == 2 and err.count("\n") == 1 and says in err and "--recover-state" in err, err
    assert prune_calls == [] and not (tmp_path / "new").exists()
    assert thing.is_fifo() if before is None else digest(thing) == before


def test_recover_state_inside_out_is_refused(tiny_dirs, tmp_path, capsys, prune_calls):
    code, _, err = cli(capsys, prune_args(tiny_dirs["delta_net"], tmp_path / "new") + RECOVER +
                       ["--recover-state", tmp_path / "new" / "state"])
    assert code == 2 and "separate folders" in err and prune_calls == []


def test_resume_with_nothing_saved_says_so(tiny_dirs, tmp_path, capsys):
    state = tmp_path / "state"
    code, _, err = cli(capsys, prune_args(tiny_dirs["delta_net"], tmp_path / "new") + RECOVER +
                       ["--recover-state", state, "--recover-resume"])
    assert code == 0, err
    assert f"no saved recovery state in {state}: starting at step 0" in err


def test_a_resume_with_another_prune_is_refused_before_the_prune(tiny_dirs, tmp_path, capsys, monkeypatch,
                                                                 prune_calls):
    """The state records what was pruned; a resume of another prune says what differs, before any work."""
    state = tmp_path / "state"
    argv = prune_args(tiny_dirs["delta_net"], tmp_path / "new") + RECOVER + ["--recover-state", state]
    with monkeypatch.context() as m:  # Ctrl-C before the first step: the state is saved
        m.setattr(recovery, "check", lambda cancel=None: (_ for _ in ()).throw(Cancelled()))
        code, _, err = cli(capsys, argv)
    assert code == 2 and "its state is saved in" in err and writes.marker_record(state)["kind"] == "recovery state"
    prune_calls.clear()
    code, _, err = cli(capsys, prune_args(tiny_dirs["delta_net"], tmp_path / "new", "random") + RECOVER +
                       ["--recover-state", state, "--recover-resume"])
    assert code == 2 and "strategy: 'l1' → 'random'" in err and err.count("\n") == 1, err
    assert prune_calls == []
    code, _, err = cli(capsys, argv + ["--recover-resume"])  # the same prune: resumed and finished
    assert code == 0 and not state.exists(), err


# ---- models, recovery states, cards and work folders are never taken for one another -----------------------------

def test_overwrite_never_replaces_a_recovery_state_or_a_card_folder(tiny_dirs, tmp_path, capsys, pruned_pair):
    """Before: a recovery state (config.json + *.safetensors) passed as a model the tool wrote."""
    from analysis.io.recovery_state import save_state
    import torch
    model, pruned = pruned_pair
    state = tmp_path / "state"
    p = torch.nn.Parameter(torch.zeros(2))
    save_state(state, settings={}, identity="x", config={}, step=0, params={"p": p}, best={"p": p.detach().clone()},
               optimizer=torch.optim.AdamW([p]), generator=torch.Generator(), record={})
    card = _card_folder(tmp_path / "card")
    for folder, kind in ((state, "recovery state"), (card, "model card")):
        before = digest(folder)
        code, _, err = cli(capsys, prune_args(tiny_dirs["delta_net"], folder) + ["--overwrite"])
        assert code == 2 and f"is a {kind} folder this tool wrote, not a model folder" in err, err
        assert digest(folder) == before


def test_training_work_folder_inside_a_model_is_refused(old_model, tmp_path, capsys):
    """Before: the checkpoint/ was written inside the model folder, which then held files its marker did not list."""
    before = digest(old_model)
    code, _, err = cli(capsys, ["train", "--out", tmp_path / "final", "--work", old_model / "work", "--steps", "1",
                                "--task", "recall", "--hidden-size", "32", "--layers", "1", "--heads", "1",
                                "--head-dim", "16", "--batch", "2", "--device", "cpu", "--quiet"])
    assert code == 2 and "a model folder this tool wrote" in err and err.count("\n") == 1, err
    assert digest(old_model) == before and not (tmp_path / "final").exists()


def test_card_never_rewrites_a_bundled_sample_without_in_place(capsys, monkeypatch):
    """Before: `card deltanet-recall` rewrote the sample's tracked README.md and card.json."""
    import analysis.inspect.model_card as model_card
    calls = []
    monkeypatch.setattr(model_card, "build_card", lambda model: calls.append(1) or {"name": "stub"})
    sample = SAMPLES_DIR / "deltanet-recall"
    before = digest(sample)
    code, _, err = cli(capsys, ["card", "deltanet-recall"])
    assert code == 2 and "bundled sample" in err and "--out DIR" in err and err.count("\n") == 1, err
    assert digest(sample) == before and calls == []


def test_card_out_is_a_marked_folder_swapped_in(capsys, monkeypatch, tmp_path, saved_model):
    """Before: --out was created in place (a kill left it holding a temporary file, and the re-run was refused)."""
    import analysis.inspect.model_card as model_card
    monkeypatch.setattr(model_card, "build_card", lambda model: {"name": "stub"})
    monkeypatch.setattr(model_card, "render", lambda card: "# stub card\n")
    monkeypatch.setattr(model_card, "read_training", lambda path: {})
    out = tmp_path / "card"
    seen = []
    real = writes.write_model_dir
    monkeypatch.setattr(writes, "write_model_dir", lambda *a, **k: seen.append(k["kind"]) or real(*a, **k))
    assert cli(capsys, ["card", saved_model, "--out", out])[0] == 0
    assert cli(capsys, ["card", saved_model, "--out", out])[0] == 0  # its own card folder: replaced whole
    assert seen == ["model-card", "model-card"] and writes.marker_record(out)["kind"] == "model-card"
    assert sorted(os.listdir(out)) == sorted([writes.MARKER, "README.md", "card.json"])
    code, _, err = cli(capsys, ["card", saved_model, "--out", saved_model.parent])  # a folder of another kind
    assert code == 2


# ---- journals ---------------------------------------------------------------------------------------------------

def test_a_fifo_named_like_a_journal_never_hangs_a_write(tmp_path):
    """Before: `models --json PARENT/out.json` blocked until killed (the reclaim step read every journal)."""
    fifo = _fifo(tmp_path / f".x{swap.JOURNAL_SUFFIX}")
    run = subprocess.run([sys.executable, "-m", "analysis", "models", "--json", str(tmp_path / "out.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "out.json").read_text()) is not None and fifo.is_fifo()
    assert f"skipped {swap.show(fifo)}" in run.stderr and run.stderr.count("swap journal") == 1


@pytest.mark.parametrize("new, old", [(".", ".."), ("..", "."), ("../x.partial", ".y.replaced-00000000")])
def test_a_journal_naming_dot_dot_or_a_path_is_ignored_and_named(tmp_path, new, old, capsys):
    """Before: a journal whose names were . or .. made every later write into its folder fail ("device or
    resource busy" / "invalid argument") without naming the journal."""
    parent = tmp_path / "folder"
    parent.mkdir()
    (parent / writes.MARKER).write_text(json.dumps({"written_by": writes.WRITER, "kind": "model", "files": []}))
    journal = parent / f".gone{swap.JOURNAL_SUFFIX}"
    journal.write_text(json.dumps({"written_by": writes.WRITER, "target": "gone", "new": new, "old": old}))
    writes.write_text(parent / "out.json", "{}")
    err = capsys.readouterr().err
    assert (parent / "out.json").read_text() == "{}" and journal.exists() and parent.is_dir()
    assert f"ignored {swap.show(journal)}" in err and err.count("\n") == 1, err
