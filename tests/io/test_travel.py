"""Issue 44: a saved prune travels — it loads with plain transformers (+ fla) and trust_remote_code=True where the
project cannot be imported, and gives the project's logits.

Per family × {per-layer keys, heads, both} (heads where the family removes them; RWKV-7 keys only): prune a case
model whose every parameter is awake (tests/family_cases), save it through the project's save path, then
- the shipped configuration/modeling files import nothing of the project (an AST scan);
- the project's own load of the folder equals the in-memory prune;
- in a subprocess with `sys.modules["analysis"] = None` and its working directory outside the checkout
  (tests/oracle/travel_load.py), the folder loads with trust_remote_code=True, its logits equal the project's
  (rel 1e-4) and greedy generation of a few tokens gives the project's tokens.
transformers families run there with fla hidden (transformers' torch path); fla families run fla's real Triton
kernels under TRITON_INTERPRET=1 (slow: marked, tiny sequences).
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from family_cases import fewer_heads, logits

LOADER = Path(__file__).resolve().parents[1] / "oracle" / "travel_load.py"
NEW_TOKENS = 3
KINDS = ("keys", "heads", "both")


def _mamba(model_type):
    return lambda: importlib.import_module("family_cases.mamba2").make_model(model_type)


def _sibling(kind):
    return lambda: importlib.import_module("family_cases.qwen3_5").make_sibling(kind)


def _case(module):
    return lambda: importlib.import_module(f"family_cases.{module}").CASE.make_model()


def _fla_hybrid():
    return importlib.import_module("family_cases.fla_hybrid").make_model()


# transformers families (fla hidden in the loader): one type per family by default, the other types slow
TRANSFORMERS_FAST = {"qwen3_5": _case("qwen3_5"), "nemotron_h": _mamba("nemotron_h"), "kimi_linear": _case("kimi_linear")}
TRANSFORMERS_MORE = {"qwen3_next": _sibling("qwen3_next"), "qwen3_5_moe_text": _sibling("qwen3_5_moe_text"),
                     "olmo_hybrid": _sibling("olmo_hybrid"), **{t: _mamba(t) for t in
                                                             ("mamba2", "granitemoehybrid", "falcon_h1", "bamba", "zamba2")}}
FLA = {"delta_net": _case("delta_net"), "gated_deltanet": _case("gated_deltanet"), "gla": _case("gla"),
       "kda": _case("kda"), "rwkv7": _case("rwkv7"), "fla_hybrid": _fla_hybrid}
KEYS_ONLY = {"rwkv7"}


def pruned(model, kind: str):
    """A prune of `kind`: per-layer key dims (a different ratio per layer), heads (per-layer counts), or both."""
    from analysis.models.key_plan import key_dims, plan_key_dims
    from analysis.shrink.heads.prune import HeadPlan, prune_with_heads
    from analysis.shrink.prune import prune
    layers = len(key_dims(model))
    dims = plan_key_dims(model, ratios=[(0.5, 0.25)[i % 2] for i in range(layers)]) if kind != "heads" \
        else key_dims(model)
    if kind == "keys":
        return prune(model, "l1", dims, seed=1).model
    heads = HeadPlan("random", tuple(fewer_heads(model)))
    return prune_with_heads(model, "l1" if kind == "both" else None, dims, heads, seed=1).model


def project_imports(path: Path) -> list[str]:
    """Imports of the project (`analysis`, or anything of this checkout) in one shipped file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        found += [n for n in names if n.split(".")[0] in ("analysis", "ui", "pages", "app", "tests")]
    return found


def save_cases(builders: dict, tmp_path: Path, seq: int) -> list[dict]:
    """Prune, save and check the project's side of every case; the jobs for the loader."""
    from analysis.io.model_dir import save_model
    from analysis.models.load import load_model
    jobs = []
    for name, build in builders.items():
        for kind in (("keys",) if name in KEYS_ONLY else KINDS):
            model = build()
            small = pruned(model, kind)
            folder = save_model(small, tmp_path / f"{name}-{kind}")
            shipped = sorted(folder.glob("*.py"))
            assert [p.name.split("_")[0] for p in shipped] == ["configuration", "modeling"], (name, kind, shipped)
            assert all(project_imports(p) == [] for p in shipped)
            config = json.loads((folder / "config.json").read_text())
            assert config["model_type"].startswith("pruned_") and set(config["auto_map"]) == {
                "AutoConfig", "AutoModelForCausalLM"}
            ids = torch.randint(1, model.config.vocab_size, (2, seq), generator=torch.Generator().manual_seed(5))
            mine = logits(small, ids)
            assert (mine - logits(model, ids)).abs().max() > 1e-4, "the prune must change the logits"
            own = load_model(str(folder), device="cpu")
            assert (logits(own, ids) - mine).abs().max() <= 1e-5 * max(1.0, float(mine.abs().max()))
            per_layer_state = config.get("ssm_state_sizes") is not None   # Mamba-2: no cache at per-layer N
            with torch.no_grad():
                tokens = small.generate(ids[:1], max_new_tokens=NEW_TOKENS, do_sample=False,
                                        use_cache=not per_layer_state, pad_token_id=0)
            torch.save(ids, folder.parent / f"{folder.name}.ids.pt")
            jobs.append({"folder": str(folder), "ids": str(folder.parent / f"{folder.name}.ids.pt"),
                         "out": str(folder.parent / f"{folder.name}.out.pt"), "new_tokens": NEW_TOKENS,
                         "use_cache": not per_layer_state, "name": f"{name}/{kind}",
                         "logits": mine, "tokens": tokens})
    return jobs


def load_without_project(jobs: list[dict], tmp_path: Path, env: dict, timeout: int) -> None:
    """Run the loader on every job in one subprocess outside the checkout and compare with the project."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "jobs.json").write_text(json.dumps([{k: j[k] for k in ("folder", "ids", "out", "new_tokens",
                                                                       "use_cache")} for j in jobs]))
    run_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run_env.update(HF_MODULES_CACHE=str(tmp_path / "hf_modules"), **env)
    run = subprocess.run([sys.executable, str(LOADER), str(outside / "jobs.json")], cwd=outside, env=run_env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-4000:]
    failures = []
    for job in jobs:
        got = torch.load(job["out"], weights_only=True)
        rel = float((got["logits"] - job["logits"]).abs().max() / job["logits"].abs().max())
        if rel >= 1e-4:
            failures.append(f"{job['name']}: logits rel {rel:.2e}")
        if not torch.equal(got["generated"], job["tokens"]):
            failures.append(f"{job['name']}: generated {got['generated'].tolist()} != {job['tokens'].tolist()}")
        assert "transformers_modules" in run.stdout   # loaded through the folder's own code
    assert failures == []


def exported_like_old(job: dict, tmp_path: Path) -> dict:
    """The job's folder as saved before prunes shipped code (no .py files, no auto_map or layout), given its code
    by `python -m analysis export`: the same job on the exported folder."""
    import shutil

    from analysis.cli.main import main
    old = tmp_path / f"{Path(job['folder']).name}-old"
    shutil.copytree(job["folder"], old, ignore=shutil.ignore_patterns("*.py", "README.md", ".state-rank-model.json"))
    config = json.loads((old / "config.json").read_text())
    del config["auto_map"], config["pruned_layout"]
    (old / "config.json").write_text(json.dumps(config))
    assert main(["export", str(old), "--out", str(tmp_path / "exported"), "--quiet"]) == 0
    return {**job, "folder": str(tmp_path / "exported"), "out": str(tmp_path / "exported.out.pt"),
            "name": job["name"] + " exported"}


def test_transformers_families_travel(tmp_path):
    jobs = save_cases(TRANSFORMERS_FAST, tmp_path, seq=12)
    jobs.append(exported_like_old(jobs[-1], tmp_path))   # Kimi Linear's key-dim class and heads, exported
    load_without_project(jobs, tmp_path, {"HIDE_FLA": "1"}, 900)


@pytest.mark.slow
def test_more_transformers_types_travel(tmp_path):
    load_without_project(save_cases(TRANSFORMERS_MORE, tmp_path, seq=12), tmp_path, {"HIDE_FLA": "1"}, 1800)


# fla builds a hybrid's softmax `attn` layer only where flash-attn is installed (fla/layers/attn.py raises otherwise;
# the project routes it to torch): without flash-attn an fla hybrid loads nowhere but in the project
NO_FLASH_ATTN = importlib.util.find_spec("flash_attn") is None


@pytest.mark.slow
@pytest.mark.parametrize("family", [
    pytest.param(f, marks=pytest.mark.skipif(NO_FLASH_ATTN, reason="fla's softmax attn layer needs flash-attn"))
    if f == "fla_hybrid" else f for f in FLA])
def test_fla_families_travel_on_fla_kernels(tmp_path, family):
    """fla's real kernels, interpreted: T ≤ 64 picks fla's fused_recurrent kernels (the chunk kernels cannot run
    interpreted); 8 tokens. RWKV-7's pruned layers (dk' < dv) need the shipped guard on fla's bonus-term kernel,
    which indexes v with r's head width (without it the dk' = 24 layer's output reached 1e18 here)."""
    load_without_project(save_cases({family: FLA[family]}, tmp_path, seq=8), tmp_path, {"TRITON_INTERPRET": "1"}, 1800)
