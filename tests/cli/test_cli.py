"""The CLI end to end on tiny real checkpoints: JSON shape, human output, one-sentence errors."""
import json
import subprocess
import sys

import pytest

from analysis.cli.main import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "analysis", *args], capture_output=True, text=True, timeout=300)


def test_help_lists_subcommands():
    out = run_cli("--help")
    assert out.returncode == 0
    for name in ("models", "rank", "noise", "importance", "prune", "ppl", "latency", "sweep"):
        assert name in out.stdout


def test_rank_json(tiny_model_dir, capsys):
    assert main(["rank", str(tiny_model_dir), "--tokens", "80", "--batch", "2", "--stride", "8", "--json", "-",
                 "--device", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "cpu" and report["tokens"] == 80 and report["batch"] == 2
    assert "Shakespeare" in report["dataset"]
    assert len(report["layers"]) == 2
    head = report["layers"][0]["heads"][0]
    for key in ("head", "stable_rank", "rank_utilization", "effective_rank", "energy_rank", "condition_number"):
        assert key in head
    assert 0 < head["rank_utilization"] <= 1
    trace = report["trace"]
    assert trace["positions"][-1] == 79 and len(trace["per_layer_head"][0][0]) == len(trace["positions"])


def test_rank_every_token_agrees_with_svd_trace(tiny_model_dir, capsys):
    assert main(["rank", str(tiny_model_dir), "--tokens", "60", "--batch", "2", "--stride", "7", "--every-token",
                 "--json", "-", "--device", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    svd, dense = report["trace"], report["every_token"]
    assert dense["positions"] == list(range(60)) and "Rayleigh" in dense["method"]
    for layer_svd, layer_dense in zip(svd["per_layer_head"], dense["per_layer_head"]):
        for head_svd, head_dense in zip(layer_svd, layer_dense):
            assert len(head_dense) == 60
            for position, value in zip(svd["positions"], head_svd):
                assert abs(head_dense[position] - value) < 1e-4


def test_noise_json(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "noise.json"
    assert main(["noise", str(tiny_model_dir), "--tokens", "64", "--batch", "1", "--samples", "32",
                 "--snr", "10,30", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    head = report["layers"][0]["heads"][0]
    assert report["snr_db"] == [10.0, 30.0] and len(head["mc_singular"][0]["mean"]) == 2
    assert head["mc_singular"][0]["mean"][1] < head["mc_singular"][0]["mean"][0]  # less noise, less error
    assert "mc_real_keys" in head


@pytest.mark.parametrize("args, message", [
    (["rank", "/no/such/dir"], "does not exist|No model named"),
    (["rank", "{model}", "--stride", "0", "--tokens", "16", "--batch", "1"], "--stride"),
    (["rank", "{model}", "--tokens", "100000000"], "needs about .* of memory"),
    (["rank", "{model}", "--text", "{empty}"], "empty"),
])
def test_errors_are_one_sentence_without_traceback(tiny_dirs, tmp_path, args, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    args = [a.format(model=tiny_dirs["delta_net"], empty=empty) for a in args]
    out = run_cli(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("error: ") and len(out.stderr.strip().splitlines()) == 1
    import re
    assert re.search(message, out.stderr)
