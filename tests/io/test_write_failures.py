"""Issue 25 (defect 5, build 5): a full disk, a read-only file system or a denied permission while weights are
written is one sentence and exit 2 (as for JSON), and leaves nothing half-written behind (the old model intact)."""
import errno
import hashlib
from pathlib import Path

import pytest
import safetensors.torch
from safetensors import SafetensorError

from analysis.cli.main import main

TINY_TRAIN = ["--task", "recall", "--hidden-size", "32", "--layers", "1", "--heads", "1", "--head-dim", "16",
              "--batch", "2", "--warmup", "1", "--eval-every", "2", "--checkpoint-every", "2", "--recall-pairs", "2",
              "--recall-keys", "8", "--device", "cpu", "--steps", "2", "--quiet"]


def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def failing_writer(monkeypatch, failure, where: Path):
    """safetensors' own writer fails the way it does on a full disk (only for files under `where`)."""
    real = safetensors.torch.serialize_file

    def serialize(tensors, filename, metadata=None):
        if Path(filename).resolve().is_relative_to(where.resolve()):
            raise failure
        return real(tensors, filename, metadata=metadata)
    monkeypatch.setattr(safetensors.torch, "serialize_file", serialize)


FAILURES = {
    "the disk is full": SafetensorError("Error while serializing: I/O error: No space left on device (os error 28) "
                                        "at path \"x/.tmpAbC\""),
    "the file system is read-only": SafetensorError("Error while serializing: IoError(Os { code: 30, kind: "
                                                    "ReadOnlyFilesystem, message: \"Read-only file system\" })"),
    "permission denied": OSError(errno.EACCES, "Permission denied"),
}


@pytest.mark.parametrize("reason", list(FAILURES))
@pytest.mark.parametrize("overwrite", [False, True])
def test_prune_out_write_failure_is_one_sentence_and_leaves_nothing(tmp_path, tiny_dirs, monkeypatch, capsys,
                                                                     reason, overwrite):
    out = tmp_path / "outs" / "pruned"
    args = ["prune", str(tiny_dirs["delta_net"]), "--strategy", "l1", "--eval-tokens", "257", "--device", "cpu",
            "--quiet", "--out", str(out)]
    out.parent.mkdir()
    if overwrite:
        assert main([*args, "--ratio", "0.25"]) == 0
    before = tree(tmp_path)
    failing_writer(monkeypatch, FAILURES[reason], tmp_path / "outs")
    capsys.readouterr()
    assert main([*args, "--ratio", "0.5", *(["--overwrite"] if overwrite else [])]) == 2
    err = capsys.readouterr().err
    assert err == f"error: Could not write the model to {out}: {reason}; choose another location.\n", err
    assert tree(tmp_path) == before      # nothing half-written (no temporary folder), the old model byte for byte, the old model byte for byte


def test_train_out_disk_full_is_one_sentence_and_keeps_the_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out, work = tmp_path / "final", tmp_path / "work"
    real = safetensors.torch.serialize_file

    def serialize(tensors, filename, metadata=None):
        if "/.final." in filename:  # the final model's temporary folder only
            raise FAILURES["the disk is full"]
        return real(tensors, filename, metadata=metadata)
    monkeypatch.setattr(safetensors.torch, "serialize_file", serialize)
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--work", str(work), *TINY_TRAIN]) == 2
    err = capsys.readouterr().err
    assert err == f"error: Could not write the model to {out}: the disk is full; choose another location.\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"] and (work / "checkpoint").is_dir()
