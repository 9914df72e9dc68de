"""Issue 41, probe rows 5–7: a map with non-finite or absurd numbers is one sentence (not scipy's or math's
traceback); `plan` refuses a plan that rounding turns into no prune, with `prune`'s sentence (one shared check);
every hint prints a command that runs from any directory."""
from __future__ import annotations

import json
import re
import shlex

import pytest

from analysis.cli.main import main
from analysis.shrink.map_check import check_map
from analysis.shrink.sensitivity import shipped_map_path
from family_cases.text_lm import build_tiny
from ui_fixtures import save_tiny_recall

SAMPLE = "deltanet-small"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def quick_machine(monkeypatch):
    """No timing forward (no estimate line on a busy machine): these tests are about other things."""
    from analysis.models import workload
    monkeypatch.setattr(workload, "forward_seconds", lambda model, batch, tokens: 0.001)


def run(argv, capsys):
    code = main([str(a) for a in argv] + ["--device", "cpu"])
    got = capsys.readouterr()
    return code, got.out, got.err


def one_sentence(code, err) -> str:
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    return err.strip()


# ---- row 5: a map with non-finite or absurd values --------------------------------------------------------

def _edit(smap: dict, how: str) -> dict:
    p = smap["points"][0]
    if how == "huge":        # the probe's: every loss huge but finite
        for i, q in enumerate(smap["points"]):
            q["loss"] = 1e300 * (i + 1)
    elif how == "large":     # finite, no overflow anywhere, still no measurement: e^1000 times the perplexity
        p["loss"] = 1000.0
    elif how == "nan":
        p["loss"] = float("nan")
    elif how == "inf-se":
        p["se"] = float("inf")
    elif how == "text":
        p["loss"] = "0.1"
    elif how == "baseline":
        smap["baseline"] = 0.5
    elif how == "layer":
        p["layer"] = 99
    elif how == "sum":       # each layer's loss under the bound, the plan's sum past what exp() holds
        for q in smap["points"]:
            q["loss"], q["se"] = 99.0, 0.0
        smap["layers"] = smap["layers"] * 2
        smap["points"] += [{**q, "layer": q["layer"] + 4} for q in smap["points"]]
    return smap


@pytest.mark.parametrize("how", ["huge", "large", "nan", "inf-se", "text", "baseline", "layer", "sum"])
def test_plan_with_a_map_of_absurd_or_non_finite_numbers_is_one_sentence(how, tmp_path, capsys):
    path = tmp_path / f"{how}.json"
    smap = _edit(json.loads(shipped_map_path(SAMPLE, "l1").read_text()), how)
    path.write_text(json.dumps(smap))  # NaN and Infinity as Python's json writes them (a hand edit)
    err = one_sentence(*run(["plan", SAMPLE, "--ratio", "0.6", "--map", path], capsys)[::2])
    assert f"--map {path}" in err and "measure the map again" in err, err


def test_prune_allocate_reads_the_map_through_the_same_check(tmp_path, capsys):
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(_edit(json.loads(shipped_map_path(SAMPLE, "l1").read_text()), "huge")))
    err = one_sentence(*run(["prune", SAMPLE, "--strategy", "l1", "--allocate", "sensitivity", "--budget", "0.5",
                             "--map", path, "--out", tmp_path / "never"], capsys)[::2])
    assert "1e+300" in err and not (tmp_path / "never").exists(), err


def test_every_shipped_map_passes_the_check():
    maps = [p for p in shipped_map_path(SAMPLE, "l1").parent.glob("sensitivity-*.json")
            if json.loads(p.read_text()).get("kind") == "sensitivity-map"]
    assert len(maps) >= 4
    for path in maps:
        check_map(json.loads(path.read_text()), str(path))


# ---- row 6: a plan that rounding turns into no prune ------------------------------------------------------

def test_plan_refuses_what_prune_refuses_with_the_same_sentence(tmp_path, capsys):
    plan = one_sentence(*run(["plan", SAMPLE, "--ratio", "0.99", "--round-to", "64"], capsys)[::2])
    prune = one_sentence(*run(["prune", SAMPLE, "--strategy", "l1", "--ratio", "0.99", "--round-to", "64",
                               "--out", tmp_path / "never"], capsys)[::2])
    assert plan == prune and "keeps every key channel after rounding to a multiple of 64" in plan, (plan, prune)
    code, out, err = run(["plan", SAMPLE, "--ratio", "0.99", "--round-to", "16"], capsys)
    assert code == 0 and "predicted" in out, err   # a plan that still prunes is predicted as before
    code, out, err = run(["plan", SAMPLE, "--ratio", "0"], capsys)
    assert code == 0 and "unpruned" in out, err     # asking for nothing is not a surprise


# ---- row 7: hints name the model so the command runs from anywhere ----------------------------------------

def _hint(err: str) -> list[str]:
    """The `python -m analysis …` command a one-sentence error suggests, as argv after `python -m analysis`."""
    found = re.search(r"`python -m analysis ([^`]+)`", err)
    assert found, err
    return shlex.split(found.group(1))


@pytest.mark.parametrize("given", ["relative", "absolute"])
def test_the_map_hint_of_plan_runs_from_another_directory(given, tmp_path, capsys, monkeypatch, sweep_cache):
    (tmp_path / "here" / "models").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    model_dir = tmp_path / "here" / "models" / "tiny net"   # a space too: the hint is quoted for a shell
    build_tiny("delta_net").save_pretrained(model_dir)
    monkeypatch.chdir(tmp_path / "here")
    arg = "models/tiny net" if given == "relative" else str(model_dir)
    err = one_sentence(*run(["plan", arg, "--ratio", "0.5"], capsys)[::2])
    argv = _hint(err)
    assert argv[0] == "sensitivity" and str(model_dir) in argv, argv
    monkeypatch.chdir(tmp_path / "elsewhere")
    argv[argv.index("--ratios") + 1] = "0.5"                  # the hint's command, on fewer points (a test's time)
    code, _, err = run(argv + ["--eval-tokens", "256"], capsys)
    assert code == 0, err
    code, out, err = run(["plan", str(model_dir), "--ratio", "0.5", "--map", "map.json"], capsys)
    assert code == 0 and "predicted" in out, err


def test_the_recall_hint_runs_from_another_directory(tmp_path, capsys, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    save_tiny_recall(tmp_path / "here" / "recall")
    monkeypatch.chdir(tmp_path / "here")
    err = one_sentence(*run(["sweep", "recall"], capsys)[::2])
    argv = _hint(err)
    assert argv[:2] == ["ppl", str(tmp_path / "here" / "recall")], argv
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, out, err = run(argv, capsys)
    assert code == 0 and "pairs: accuracy" in out, err
