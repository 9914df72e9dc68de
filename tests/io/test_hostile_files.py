"""Hostile files (issue 25, defect 6 and item 8): a safetensors header length is capped before anything is
read, nesting cannot leak a RecursionError, and a FIFO or device where a file is read is refused in one
sentence ("… is not a regular file"), never a hang, never a read of /dev/zero without end."""
import json
import os
import shutil
import struct
import time

import pytest

from analysis.models import checkpoint
from analysis.cli.main import main
from analysis.errors import AnalysisError

pytestmark = pytest.mark.timeout(120)  # a FIFO that is opened for reading would hang: fail instead


def _run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, err


def _one_sentence(code, err):
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.fixture
def model_dir(tmp_path, tiny_dirs):
    path = tmp_path / "model"
    shutil.copytree(tiny_dirs["delta_net"], path)
    return path


def test_a_header_length_past_safetensors_limit_is_refused_before_reading(model_dir, capsys):
    """A sparse file whose header length says 2.5 GB: refused from its first 8 bytes, not read whole."""
    weights = model_dir / "model.safetensors"
    weights.unlink()
    with open(weights, "wb") as fh:
        fh.write(struct.pack("<Q", 2_500_000_000) + b"{")
        fh.truncate(2_600_000_000)
    start = time.monotonic()
    with pytest.raises(AnalysisError, match=r"declares a 2,500,000,000-byte safetensors header, more than the "
                                            r"100,000,000 safetensors allows"):
        checkpoint.header_entries(weights)
    code, err = _run(capsys, "rank", model_dir)
    _one_sentence(code, err)
    assert "safetensors header" in err and time.monotonic() - start < 10


def test_deeply_nested_header_and_config_are_one_sentence(model_dir, capsys):
    nested = b"[" * 200_000
    weights = model_dir / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", len(nested)) + nested)
    code, err = _run(capsys, "rank", model_dir)
    _one_sentence(code, err)
    assert "nested too deeply" in err
    (model_dir / "config.json").write_bytes(nested)
    code, err = _run(capsys, "rank", model_dir)
    _one_sentence(code, err)
    assert "nested too deeply" in err and "config.json" in err


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json", "config.json", "training.json"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_model_file_that_is_a_fifo_or_device_is_refused(model_dir, capsys, name, kind):
    target = model_dir / name
    if target.exists():
        target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        os.symlink("/dev/zero", target)
    code, err = _run(capsys, "rank", model_dir)
    _one_sentence(code, err)
    assert f"{name} is not a regular file" in err, err
    assert ("FIFO" if kind == "fifo" else "character device") in err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_text_that_is_a_fifo_or_device_is_not_a_regular_file(tiny_dirs, tmp_path, capsys, kind):
    text = tmp_path / "notes.txt"
    if kind == "fifo":
        os.mkfifo(text)
    else:
        text = "/dev/zero"
    code, err = _run(capsys, "rank", tiny_dirs["delta_net"], "--text", text, "--tokens", "16")
    _one_sentence(code, err)
    assert "is not a regular file" in err and "does not exist" not in err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "nested", "a-list"])
def test_a_hostile_map_file_is_one_sentence(tiny_dirs, tmp_path, capsys, kind):
    smap = tmp_path / "map.json"
    if kind == "fifo":
        os.mkfifo(smap)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", smap)
    elif kind == "nested":
        smap.write_text("[" * 200_000)
    else:
        smap.write_text(json.dumps([1, 2]))
    code, err = _run(capsys, "prune", tiny_dirs["delta_net"], "--strategy", "l1", "--allocate", "sensitivity",
                     "--budget", "0.5", "--map", smap, "--out", tmp_path / "out", "--eval-tokens", "64")
    _one_sentence(code, err)
    assert "--map" in err and not (tmp_path / "out").exists()
    expected = {"fifo": "is not a regular file", "dev-zero": "is not a regular file",
                "nested": "nested too deeply", "a-list": "is not a sensitivity map"}[kind]
    assert expected in err, err
