"""The real-size benchmark scripts run end to end at a tiny size (one layer, short sequences), so they cannot
rot between the sessions that run them at full size (on a GPU, or for minutes on this CPU)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: int = 600) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_rank_scale_prints_its_ratio_last():
    out = run("benchmarks/rank_scale.py", "--layers", "1", "--tokens", "128", "--repeats", "1")
    last = out.strip().splitlines()[-1]
    assert last.startswith("rank_overhead_vs_forward: ") and float(last.split()[-1]) > 0
    assert "peak RSS" in out and "delta_net" in out and "gated_deltanet" in out


def test_gpu_check_scale_part_runs_on_the_cpu():
    out = run("benchmarks/gpu_check.py", "--device", "cpu", "--layers", "1", "--tokens", "128", "--repeats", "1")
    families = 3  # benchmarks/real_size.FAMILIES: DeltaNet, Gated DeltaNet, Mamba-2
    assert out.count("× forward") == families and out.count("prune l1 0.5 (dk 128 → 64)") == families
    assert "finite: True" in out and "finite: False" not in out
    assert out.count("latency at the 340M shape") == 8


def test_real_size_saves_a_loadable_checkpoint_and_refuses_a_used_directory(tmp_path):
    out_dir = tmp_path / "model"
    run("benchmarks/real_size.py", "--shape", "1.3B", "--layers", "1", "--out", str(out_dir))
    config = json.loads((out_dir / "config.json").read_text())
    assert (config["hidden_size"], config["num_heads"], config["num_hidden_layers"]) == (2048, 16, 1)
    assert list(out_dir.glob("*.safetensors")) and not list(out_dir.glob("*.bin"))
    from analysis.models import load as models
    model = models.load_model(str(out_dir))
    assert models.describe(model).head_k_dims == [128]
    before = sorted(p.name for p in out_dir.iterdir())
    done = subprocess.run([sys.executable, "benchmarks/real_size.py", "--layers", "1", "--out", str(out_dir)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0 and "not empty" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == before


def test_recovery_methods_prints_a_row_per_point_with_paired_errors():
    out = run("evidence/recovery_methods.py", "--models", "gated-deltanet-small", "--points", "random:0.5",
              "--methods", "qk,lora-kd", "--steps", "1", "--batch", "1", "--seq-len", "32", "--eval-every", "1",
              "--eval-tokens", "512", "--context", "64", "--threads", "1")
    row = next(line for line in out.splitlines() if line.startswith("| random 0.5"))
    cells = row.strip("|").split("|")
    assert len(cells) == 4 and float(cells[1]) > 0  # strategy, after pruning, after qk, after lora-kd
    assert row.count(" ± ") == 2 and row.count("kept step") == 2  # 8 windows of 64 tokens: a finite paired SE


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_check_scale_part_on_cuda():
    out = run("benchmarks/gpu_check.py", "--scale-only", "--layers", "2", "--tokens", "512", "--repeats", "2")
    assert "finite: True" in out and "finite: False" not in out


@pytest.mark.browser
def test_first_chart_times_both_launches_and_prints_its_ratio_last():
    out = run("benchmarks/first_chart.py", "--repeats", "1", "--arrive-after", "0")
    rows = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(rows) == 4 and sum("warm (python -m ui.shared.launch)" in r for r in rows) == 2, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("speedup_vs_reference: ") and float(last.split()[-1]) > 0


def test_downstream_evidence_writes_a_json_and_a_table_per_task(tmp_path):
    out = run("evidence/downstream_evidence.py", "--models", "deltanet-recall", "--strategies", "l1", "--ratios",
              "0.5", "--limit", "2", "--out", str(tmp_path))
    payload = json.loads((tmp_path / "downstream-deltanet-recall.json").read_text())
    assert [(r["strategy"], r["ratio"]) for r in payload["results"]] == [("unpruned", 0.0), ("l1", 0.5)]
    assert out.count("| l1 | ") == 3 and out.count(" ± ") >= 6  # three recall tasks, accuracy ± standard error
    again = run("evidence/downstream_evidence.py", "--table", str(tmp_path / "downstream-deltanet-recall.json"))
    assert again.strip() == out.strip()


def test_heads_evidence_in_the_docs_is_the_tables_of_the_shipped_results():
    """Issue 32: the heads tables (docs/heads.md) are evidence/heads_table.py run on sample_models/results, verbatim."""
    out = run("evidence/heads_table.py", "sample_models/results")
    readme = (ROOT / "docs" / "heads.md").read_text()
    block = readme.split("<!-- heads-evidence -->", 1)[1].split("<!-- /heads-evidence -->", 1)[0]
    assert out.count("| **best heads − best dk** |") >= 3   # the equal-budget table for at least three samples
    assert [line for line in block.splitlines() if line] == [line for line in out.splitlines() if line]
