"""Issue 25 (defect 2, build 1): a directory is replaced in one step, interrupted swaps are finished or rolled
back by the next command, and leftovers that carry the tool's marker are reclaimed (nothing else is)."""
import json
import os
from pathlib import Path

import pytest

from analysis.errors import AnalysisError
from analysis.io import swap, writes
from analysis.io.model_dir import save_model
from family_cases.text_lm import build_tiny


@pytest.fixture(scope="module")
def model():
    return build_tiny("delta_net")


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def number(out: Path) -> int:
    return json.loads((out / "pruning.json").read_text())["n"]


def test_replace_uses_one_exchange_and_the_name_is_never_missing(tmp_path, model, monkeypatch):
    out = save_model(model, tmp_path / "m", metadata={"n": 1})
    seen = []
    real = swap.renameat2

    def watch(src, dst, flags):
        done = real(src, dst, flags)
        seen.append((flags, done, os.path.isdir(out)))
        return done
    monkeypatch.setattr(swap, "renameat2", watch)
    renames = []
    monkeypatch.setattr(os, "rename", lambda *a, _r=os.rename: (renames.append(a), _r(*a))[1])
    save_model(model, out, metadata={"n": 2}, overwrite=True)
    if not seen or not seen[0][1]:
        pytest.skip("this kernel or file system has no RENAME_EXCHANGE (the journal tests cover it)")
    assert seen == [(swap.RENAME_EXCHANGE, True, True)] and renames == []   # one step, no plain rename
    assert number(out) == 2 and listing(tmp_path) == ["m"]


@pytest.mark.parametrize("stage", ["journal written", "old moved aside", "new in place"])
def test_an_interrupted_journal_swap_is_finished_or_rolled_back_by_the_next_command(tmp_path, model, monkeypatch,
                                                                                   capsys, stage):
    out = save_model(model, tmp_path / "m", metadata={"n": 1})
    (tmp_path / "notes.txt").write_text("the user's")
    monkeypatch.setattr(swap, "FORCE_JOURNAL", True)
    real_rename, calls = os.rename, []

    class Killed(BaseException):
        pass

    def rename(src, dst):  # the process "dies" at this rename: nothing after it runs (no rollback either)
        calls.append(1)
        if stage == "journal written" or (stage == "old moved aside" and len(calls) >= 2) or len(calls) >= 3:
            raise Killed
        real_rename(src, dst)
        if stage == "new in place" and len(calls) == 2:
            raise Killed
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(swap, "remove_marked", lambda folder: None)  # (the except path would tidy: a kill cannot)
    with pytest.raises(Killed):
        save_model(model, out, metadata={"n": 2}, overwrite=True)
    monkeypatch.undo()
    assert swap.journal_path(out).exists()
    if stage == "old moved aside":
        assert not out.exists()       # the one instant the journal exists for
    capsys.readouterr()
    assert writes.check_new_dir(out, overwrite=True) == out   # the next command touching it
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted replace" in err, err
    assert number(out) == (2 if stage != "journal written" else 1)
    save_model(model, out, metadata={"n": 3}, overwrite=True)
    assert number(out) == 3 and listing(tmp_path) == ["m", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "the user's"


def test_loading_a_model_finishes_its_interrupted_swap(tmp_path, model, monkeypatch, capsys):
    from analysis.models.load import load_model
    out = save_model(model, tmp_path / "m", metadata={"n": 1})
    new = save_model(model, tmp_path / ".m.x1234567.partial", metadata={"n": 2})
    aside = tmp_path / ".m.replaced-00000000"
    os.rename(out, aside)                                  # killed between the two renames
    swap.journal_path(out).write_text(json.dumps({"written_by": writes.WRITER, "target": "m", "new": new.name,
                                                  "old": aside.name}))
    load_model(str(out), device="cpu")
    assert "finished" in capsys.readouterr().err and number(out) == 2


def test_leftovers_with_the_marker_are_reclaimed_and_nothing_else(tmp_path, model, capsys):
    def saved(name):  # (saved elsewhere and moved in: a save into tmp_path would already reclaim the others)
        os.rename(save_model(model, tmp_path / "elsewhere" / name, metadata={"n": 1}), tmp_path / name)
        return tmp_path / name
    saved(".a.abc12345.partial")                                                     # complete, never published
    saved(".a.replaced-1234abcd")                                               # an old one never removed
    half = tmp_path / ".b.xyz12345.partial"                                          # killed while filling
    half.mkdir()
    (half / writes.MARKER).write_text(json.dumps({"written_by": writes.WRITER, "state": "partial", "files": []}))
    (half / "model.safetensors").write_bytes(b"half")
    (tmp_path / ".c.q1234567.partial").mkdir()                                         # killed right after mkdtemp
    (tmp_path / ".d.json.k2345678.state-rank-tmp").write_text("{")                    # a killed write_text
    user = tmp_path / ".mine.abcd1234.partial"  # the user's, no marker
    user.mkdir()
    (user / "thesis.tex").write_text("years")
    faked = saved(".e.replaced-0000000e")  # a marker, plus a foreign file
    (faked / "diary.txt").write_text("mine")
    (tmp_path / "keep.partial").write_text("not hidden: not ours")
    (tmp_path / "elsewhere").rmdir()
    capsys.readouterr()
    save_model(model, tmp_path / "new", metadata={"n": 1})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "removed 5 leftover(s)" in err, err
    assert listing(tmp_path) == [".e.replaced-0000000e", ".mine.abcd1234.partial", "keep.partial", "new"]
    assert (user / "thesis.tex").read_text() == "years" and (faked / "diary.txt").read_text() == "mine"


def test_a_leftover_in_use_by_a_live_writer_is_left_alone(tmp_path, model):
    live = tmp_path / ".a.live1234.partial"
    live.mkdir()
    fd = swap.locked_dir(live)
    try:
        save_model(model, tmp_path / "b", metadata={"n": 1})
        assert live.is_dir()
    finally:
        os.close(fd)
    save_model(model, tmp_path / "c", metadata={"n": 1})
    assert not live.exists()


def test_a_failed_save_leaves_nothing_half_written(tmp_path, model):
    def fail(folder):
        raise AnalysisError("stop")
    with pytest.raises(AnalysisError):
        save_model(model, tmp_path / "m", extra=fail)
    assert listing(tmp_path) == []
