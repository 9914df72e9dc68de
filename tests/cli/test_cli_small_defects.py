"""Issue 25, defect 8: Ctrl-C from the first milliseconds, non-regular --text files, --json inside --out, a prune
that removes nothing, invisible characters in names, and long user input echoed in errors."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.io import ray_executor
from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.io.writes import output_target

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def quick_machine(monkeypatch):
    """No timing forward (and so no estimate line on a busy machine): these tests are about other things."""
    from analysis.models import workload
    monkeypatch.setattr(workload, "forward_seconds", lambda model, batch, tokens: 0.001)


def run(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_sentence(code, err):
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


# ---- Ctrl-C ---------------------------------------------------------------------------------------------

def _startup_seconds() -> float:
    """How long a bare interpreter takes here (before it, Python's own startup cannot be helped by any code)."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return sorted(times)[1]


def test_ctrl_c_from_the_first_imports_on_is_interrupted_exit_130():
    """SIGINT at several delays, from just after the bare interpreter's start (the package's own import)
    through torch's import to the work itself: always `interrupted`, exit 130, never a traceback or −2."""
    bare = _startup_seconds()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    interrupted = 0
    for extra in (0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.5, 1.5):
        proc = subprocess.Popen([sys.executable, "-m", "analysis", "ppl", "deltanet-small", "--quiet"], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5 * bare + extra)
        if proc.poll() is not None:   # it finished first (a cached result): there was nothing to interrupt
            proc.communicate()
            assert proc.returncode == 0, (extra, proc.returncode)
            continue
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if proc.returncode == 0 and not err.strip():   # the signal came as it exited on its own
            continue
        interrupted += 1
        assert proc.returncode == 130, (extra, proc.returncode, err[-2000:])
        assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted", (extra, err[-2000:])
    assert interrupted >= 1, "every run finished before its Ctrl-C: the test interrupted nothing"


# ---- files and names --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_text_that_is_not_a_regular_file_says_so(kind, tiny_dirs, tmp_path, capsys):
    path = "/dev/zero"
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    code, _, err = run(["rank", tiny_dirs["delta_net"], "--text", path], capsys)
    one_sentence(code, err)
    assert "is not a regular file" in err and "does not exist" not in err, err


@pytest.mark.parametrize("json_at", ["{out}", "{out}/result.json", "{out}/../out"])
def test_json_equal_to_or_inside_out_is_refused_before_any_work(json_at, tiny_dirs, tmp_path, capsys, monkeypatch):
    import analysis.cli.commands.common as common
    monkeypatch.setattr(common, "load", lambda args: pytest.fail("the model was loaded before the refusal"))
    out = tmp_path / "out"
    code, _, err = run(["prune", tiny_dirs["delta_net"], "--strategy", "l1", "--ratio", "0.5", "--out", out,
                        "--json", json_at.format(out=out)], capsys)
    one_sentence(code, err)
    assert "--out" in err and ("inside" in err or "same path" in err), err
    assert not out.exists()


def test_prune_whose_rounded_plan_keeps_every_channel_is_refused(tiny_dirs, tmp_path, capsys):
    out = tmp_path / "p"
    code, _, err = run(["prune", tiny_dirs["delta_net"], "--strategy", "l1", "--ratio", "0.9999", "--round-to", "64",
                        "--out", out], capsys)
    one_sentence(code, err)
    assert "keeps every key channel after rounding to a multiple of 64" in err and "smaller rounding" in err, err
    assert not out.exists()


def test_unchanged_plan_is_none_for_a_real_prune_and_for_ratio_0(tiny_dirs):
    from family_cases.text_lm import build_tiny
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.prune_run import unchanged
    model = build_tiny("delta_net")
    assert unchanged(model, plan_key_dims(model, ratio=0.5, round_to=16), 0.5, None, 16) is None
    assert unchanged(model, plan_key_dims(model, ratio=0.0), 0.0) is None  # asked for nothing: no surprise
    assert "keeps every key channel" in unchanged(model, plan_key_dims(model, ratio=0.2, round_to=32), 0.2, None, 32)


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u2028", "\u2029", "\t", "\x1b", "\u2066"])
def test_names_with_invisible_characters_are_refused(char, tiny_dirs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp_path / "outputs"))
    for local in (False, True):
        with pytest.raises(AnalysisError, match=rf"invisible character \(U\+{ord(char):04X}"):
            output_target(f"model{char}txt.exe", local=local)
    code, _, err = run(["prune", tiny_dirs["delta_net"], "--strategy", "l1", "--ratio", "0.5",
                        "--out", tmp_path / f"model{char}x"], capsys)
    one_sentence(code, err)
    assert "invisible character" in err
    assert list(tmp_path.iterdir()) == []
    assert output_target("plain-name ünïcode", local=False).name == "plain-name ünïcode"


# ---- long input echoed short ------------------------------------------------------------------------------

def test_a_3000_character_ray_address_is_cut_in_the_error(tiny_dirs, capsys, monkeypatch):
    monkeypatch.setattr(ray_executor, "import_ray", lambda: SimpleNamespace(is_initialized=lambda: False))
    address = "h" * 3000 + ":notaport"
    code, _, err = run(["sweep", tiny_dirs["delta_net"], "--executor", "ray", "--address", address], capsys)
    one_sentence(code, err)
    assert "is not host:port" in err and len(err) < 300, len(err)


@pytest.mark.parametrize("args", [["sweep", "{m}", "--ratios", "x" * 3000], ["sweep", "{m}", "--strategies", "y" * 3000],
                                  ["sensitivity", "{m}", "--strategy", "l1", "--ratios", "z" * 3000]])
def test_long_flag_values_are_cut_in_the_error(args, tiny_dirs, capsys, tmp_path, monkeypatch):
    from analysis.io import point_cache
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    code, _, err = run([a.format(m=tiny_dirs["delta_net"]) for a in args], capsys)
    one_sentence(code, err)
    assert "…" in err and len(err) < 400, err
