"""Progress bars on stderr for long CLI work (issue 14, item 2): shown by default, gone with --quiet, and never
inside the JSON that `--json -` prints on stdout."""
import json

import pytest

from analysis.cli.main import main
from analysis.cli.commands import progress
from analysis.io import point_cache


@pytest.fixture(autouse=True)
def show_bars_at_once(monkeypatch):
    """Bars normally wait 2 s (quick steps stay silent); the tiny models here finish sooner."""
    monkeypatch.setattr(progress, "DELAY_S", 0.0)


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_rank_bar_per_layer_and_quiet(tiny_dirs, capsys):
    args = ["rank", str(tiny_dirs["delta_net"]), "--tokens", "64", "--batch", "1", "--stride", "16", "--device", "cpu",
            "--json", "-"]
    out, err = _run(capsys, *args)
    assert json.loads(out)["tokens"] == 64
    assert "rank: states of each layer" in err and "2/2" in err and "layer/s" in err
    out, err = _run(capsys, *args, "--quiet")
    assert json.loads(out)["tokens"] == 64 and err == ""


def test_sweep_bar_per_point_keeps_json_stdout_clean(tiny_dirs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    args = ["sweep", str(tiny_dirs["delta_net"]), "--strategies", "l1,random", "--ratios", "0.5", "--eval-tokens", "64",
            "--context", "32", "--no-latency", "--device", "cpu"]
    out, err = _run(capsys, *args, "--json", "-")
    payload = json.loads(out)
    assert [p["strategy"] for p in payload["results"]] == ["unpruned", "l1", "random"]
    assert payload["executor"] == "in-process"
    assert "sweep (in-process): points" in err and "3/3" in err
    out, err = _run(capsys, *args)  # human lines on stdout, served from the cache now
    assert out.count("[cached]") == 3 and "3/3" in err
    out, err = _run(capsys, *args, "--quiet")
    assert out.count("[cached]") == 3 and err == ""


def test_ppl_bar_in_percent(tiny_dirs, capsys):
    out, err = _run(capsys, "ppl", str(tiny_dirs["delta_net"]), "--context", "32", "--max-tokens", "128", "--device", "cpu",
                    "--json", "-")
    assert json.loads(out)["context"] == 32 and "ppl: test split" in err and "100/100" in err


def test_quick_steps_and_refusals_show_no_bar(tiny_dirs, capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 60.0)
    out, err = _run(capsys, "ppl", str(tiny_dirs["delta_net"]), "--context", "32", "--max-tokens", "64",
                    "--device", "cpu", "--json", "-")
    assert json.loads(out)["context"] == 32 and err == ""


def test_train_json_stdout_is_only_json(tmp_path, capsys):
    """The training log lines used to go to stdout even with --json -, which broke the JSON."""
    out, err = _run(capsys, "train", "--out", str(tmp_path / "m"), "--work", str(tmp_path / "w"), "--hidden-size",
                    "32", "--layers", "1", "--heads", "2", "--head-dim", "16", "--seq-len", "32", "--batch", "2",
                    "--steps", "2", "--warmup", "1", "--eval-every", "1", "--device", "cpu", "--json", "-")
    history = json.loads(out)["history"]
    assert [h["step"] for h in history] == [1, 2] and "train: steps" in err and "2/2" in err
