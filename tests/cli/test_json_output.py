"""Issue 11 item 6: --json writes through symlinks, FIFOs and devices, keeps normal permissions, is checked
before the work, and turns NaN into null with a warning."""
import json
import os
import stat

import pytest
import torch

from analysis.cli.main import main
from analysis.inspect.report import write_json
from family_cases.text_lm import build_tiny

PAYLOAD = {"a": 1, "b": [0.5, "x"]}


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_new_json_gets_normal_permissions_and_an_existing_file_keeps_its_mode(tmp_path, umask_022):
    write_json(PAYLOAD, str(tmp_path / "new.json"))
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o644       # mkstemp alone gives 0600
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    kept.chmod(0o640)
    write_json(PAYLOAD, str(kept))
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and json.loads(kept.read_text()) == PAYLOAD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json", "new.json"]   # no temp file left


def test_a_symlink_is_written_through_to_its_target(tmp_path):
    target = tmp_path / "real" / "out.json"
    target.parent.mkdir()
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json(PAYLOAD, str(link))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text()) == PAYLOAD


def test_a_symlink_to_dev_null_stays_and_dev_null_stays_a_device(tmp_path):
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    write_json(PAYLOAD, str(link))
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_is_written_to_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)   # a reader is waiting, as with `--json >(jq .)`
    try:
        write_json(PAYLOAD, str(fifo))
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        assert json.loads(os.read(reader, 1 << 16)) == PAYLOAD
    finally:
        os.close(reader)


def test_dev_stdout_redirected_to_a_file_is_written_into(tmp_path, capfd):
    link = tmp_path / "stdout"
    link.symlink_to("/dev/stdout")                         # (a link of our own: old code replaced the link)
    print("before", flush=True)
    write_json(PAYLOAD, str(link))                         # fd 1 is a regular (captured) file here
    out = capfd.readouterr().out
    assert out.startswith("before\n") and json.loads(out[len("before\n"):]) == PAYLOAD
    assert link.is_symlink()


def test_a_character_device_is_written_to_not_replaced(tmp_path):
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))   # a private /dev/null
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here (needs CAP_MKNOD)")
    write_json(PAYLOAD, str(node))
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_json_to_a_directory_is_refused_before_the_model_is_saved(tiny_dirs, tmp_path, capsys):
    out = tmp_path / "pruned"
    (tmp_path / "results").mkdir()
    assert main(["prune", str(tiny_dirs["delta_net"]), "--strategy", "l1", "--ratio", "0.5", "--out", str(out),
                 "--eval-tokens", "64", "--json", str(tmp_path / "results"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --json ") and "is a directory" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_ppl_with_nan_weights_writes_null_and_warns(tmp_path, capsys):
    model = build_tiny("delta_net")
    with torch.no_grad():
        model.model.layers[0].attn.q_proj.weight.fill_(float("nan"))
    model.save_pretrained(tmp_path / "nan-model")
    out = tmp_path / "ppl.json"
    assert main(["ppl", str(tmp_path / "nan-model"), "--context", "32", "--max-tokens", "64", "--json", str(out),
                 "--device", "cpu"]) == 0
    report = json.loads(out.read_text())
    assert report["perplexity"] is None and report["tokens"] == 64
    err = capsys.readouterr().err
    assert "warning:" in err and "perplexity" in err and "written as null" in err, err
