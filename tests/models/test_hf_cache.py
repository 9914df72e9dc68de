"""A hub id resolves offline from the local Hugging Face cache (issue 14, item 5)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REVISION = "0123456789abcdef0123456789abcdef01234567"


def _cache_with(tmp_path: Path, model_dir: Path, repo: str = "tiny-org/tiny-deltanet") -> Path:
    """The huggingface_hub cache layout: models--org--name/{refs/main, snapshots/<revision>/...}."""
    hub = tmp_path / "hf-home" / "hub"
    entry = hub / ("models--" + repo.replace("/", "--"))
    snapshot = entry / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for f in model_dir.iterdir():
        shutil.copy(f, snapshot / f.name)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(REVISION)
    return hub


def _cli(*args, home: Path):
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-m", "analysis", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_hub_id_loads_from_the_cache_offline(tiny_dirs, tmp_path):
    hub = _cache_with(tmp_path, tiny_dirs["delta_net"])
    out = _cli("ppl", "tiny-org/tiny-deltanet", "--context", "32", "--max-tokens", "64", "--device", "cpu",
               "--json", "-", "--quiet", home=hub.parent)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["model"] == "tiny-org/tiny-deltanet"
    assert report["source"] == str(hub / "models--tiny-org--tiny-deltanet" / "snapshots" / REVISION)
    assert report["model_type"] == "delta_net" and report["perplexity"] > 1


def test_missing_snapshot_offline_is_one_sentence(tiny_dirs, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from analysis.models import load as models
    from analysis.errors import AnalysisError
    hub = _cache_with(tmp_path, tiny_dirs["delta_net"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert models.resolve_source("tiny-org/tiny-deltanet") == hub / "models--tiny-org--tiny-deltanet" / "snapshots" / REVISION
    with pytest.raises(AnalysisError) as info:
        models.resolve_source("tiny-org/not-downloaded")
    message = str(info.value)
    assert message.startswith("'tiny-org/not-downloaded' is not in the local Hugging Face cache")
    assert str(hub) in message and "HF_HUB_OFFLINE" in message and "\n" not in message
