"""`python -m analysis card` writes only where the tool may (issue 25, defect 1): into a directory carrying
the tool's marker (card files it listed, or new ones it then records), never through a symbolic link, else
to `--out DIR`; otherwise one sentence, exit 2, before anything is measured. The card's numbers are stubbed
(measuring a real card takes minutes): these tests are about where it goes."""
import json
import os
import shutil

import pytest

import analysis.inspect.model_card
from analysis.cli.main import main
from analysis.io import card_files, writes
from analysis.models.load import SAMPLES_DIR
from family_cases.text_lm import build_tiny

TRAINING = {"arch": "delta_net", "task": "lm", "history": [{"step": 1}]}
STUB = {"name": "stub"}


@pytest.fixture
def measured(monkeypatch):
    """The card's measurement, stubbed; the list records each call (a refusal must come before it)."""
    calls = []
    monkeypatch.setattr(analysis.inspect.model_card, "build_card", lambda model: calls.append(model) or dict(STUB))
    monkeypatch.setattr(analysis.inspect.model_card, "render", lambda card: "# stub card\n")
    return calls


def _trained(path, marker: bool):
    """A tiny model directory with a training run; `marker`: as the tool saves it (its marker lists the files)."""
    build_tiny("delta_net").save_pretrained(path)
    (path / "training.json").write_text(json.dumps(TRAINING))
    if marker:
        files = sorted(os.listdir(path))
        (path / writes.MARKER).write_text(json.dumps({"written_by": writes.WRITER, "kind": "model", "files": files}))
    return path


def _card(capsys, *args):
    code = main(["card", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_users_own_readme_and_card_are_left_alone(tmp_path, capsys, measured):
    model = _trained(tmp_path / "mine", marker=False)
    (model / "README.md").write_text("my own notes\n")
    (model / "card.json").write_text('{"mine": true}')
    code, out, err = _card(capsys, model)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "--out DIR" in err, err
    assert "was not written by this tool" in err
    assert (model / "README.md").read_text() == "my own notes\n" and (model / "card.json").read_text() == '{"mine": true}'
    assert not measured                                     # refused before minutes of measuring


def test_a_foreign_readme_in_a_directory_the_tool_wrote_is_left_alone(tmp_path, capsys, measured):
    model = _trained(tmp_path / "saved", marker=True)
    (model / "README.md").write_text("added by hand\n")     # not listed in the marker
    code, _, err = _card(capsys, model)
    assert code == 2 and "README.md was not written by this tool" in err and "--out DIR" in err
    assert (model / "README.md").read_text() == "added by hand\n" and not measured


def test_a_symlinked_readme_is_never_written_through(tmp_path, capsys, measured):
    """As in a Hugging Face cache snapshot: every file a link into blobs/."""
    blob = tmp_path / "blobs" / "abc123"
    blob.parent.mkdir()
    blob.write_text("the hub's README\n")
    model = _trained(tmp_path / "snapshot", marker=True)
    (model / "README.md").symlink_to(blob)
    code, _, err = _card(capsys, model)
    assert code == 2 and "symbolic link" in err and "--out DIR" in err and err.count("\n") == 1, err
    assert blob.read_text() == "the hub's README\n" and (model / "README.md").is_symlink() and not measured

    entry = tmp_path / "models--org--tiny"                  # a real cache layout: no marker, every file a link
    snapshot, blobs = entry / "snapshots" / "rev0", entry / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for n, f in enumerate(sorted(model.iterdir())):
        if f.name != writes.MARKER:
            shutil.copyfile(f.resolve(), blobs / f"blob{n}")
            (snapshot / f.name).symlink_to(blobs / f"blob{n}")
    hub_readme = (snapshot / "README.md").resolve()
    code, _, err = _card(capsys, snapshot)
    assert code == 2 and "--out DIR" in err and hub_readme.read_text() == "the hub's README\n", err


def test_out_writes_the_card_into_a_new_directory_and_again(tmp_path, capsys, measured):
    model = _trained(tmp_path / "mine", marker=False)
    (model / "README.md").write_text("my own notes\n")
    out = tmp_path / "cards" / "mine"
    code, stdout, err = _card(capsys, model, "--out", out)
    assert code == 0 and f"in {out}" in stdout, err
    assert (out / "README.md").read_text() == "# stub card\n" and json.loads((out / "card.json").read_text()) == STUB
    assert card_files.marker_files(out) == {"README.md", "card.json"}
    assert (model / "README.md").read_text() == "my own notes\n"
    assert _card(capsys, model, "--out", out)[0] == 0      # its own card directory: written again

    foreign = tmp_path / "someone-elses"
    foreign.mkdir()
    (foreign / "README.md").write_text("theirs\n")
    code, _, err = _card(capsys, model, "--out", foreign)
    assert code == 2 and "was not written by this tool" in err and (foreign / "README.md").read_text() == "theirs\n"
    (tmp_path / "link").symlink_to(out)
    assert _card(capsys, model, "--out", tmp_path / "link")[0] == 2


def test_a_model_the_tool_trained_gets_its_card_and_the_marker_records_it(tmp_path, capsys, measured):
    model = _trained(tmp_path / "trained", marker=True)
    code, _, err = _card(capsys, model)
    assert code == 0, err
    assert (model / "README.md").read_text() == "# stub card\n"
    assert {"README.md", "card.json"} <= card_files.marker_files(model)
    assert writes.replace_refusal(model) is None            # still a model directory the tool may replace
    assert _card(capsys, model)[0] == 0                     # and its card may be written again


@pytest.mark.parametrize("name", ["deltanet-small", "gated-deltanet-small", "deltanet-recall", "qwen35-hybrid-small"])
def test_the_bundled_samples_cards_can_be_regenerated(name, tmp_path, capsys, measured):
    """The sample scripts run `card sample_models/<name> --in-place`: the samples carry the marker, listing
    their cards (checked in place, written on a copy)."""
    assert card_files.check_destination(SAMPLES_DIR / name, in_place=True) == SAMPLES_DIR / name
    copy = tmp_path / name
    shutil.copytree(SAMPLES_DIR / name, copy)
    code, _, err = _card(capsys, copy)
    assert code == 0, err
    assert (copy / "README.md").read_text() == "# stub card\n"
