"""Slow oracle: whole tiny models on the CPU path vs fla's REAL Triton kernels under TRITON_INTERPRET=1.

T ≤ 64 so fla's layers pick their fused_recurrent kernels (the chunk kernels cannot run interpreted).
The oracle runs in a subprocess that never imports `analysis`, so nothing of ours is in its path.
"""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from family_cases import decoded
from family_cases.text_lm import build_tiny

ORACLE = Path(__file__).resolve().parents[1] / "oracle" / "interpret_run.py"


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item()


@pytest.mark.slow
@pytest.mark.parametrize("kind, overrides", [
    ("delta_net", {"use_gate": True, "expand_k": 0.5}),                       # dk 16 ≠ dv 32, gated output norm
    ("gated_deltanet", {"num_v_heads": 4, "allow_neg_eigval": True, "expand_v": 2.0}),  # GVA, β×2
])
def test_models_match_fla_kernels(tmp_path, kind, overrides):
    assert_matches_oracle(build_tiny(kind, **overrides), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gla", "rwkv7"])
def test_gla_and_rwkv7_match_fla_kernels(tmp_path, family):
    """Issue 31: GLA (fused_recurrent_gla, V-first cache, short convs) and RWKV-7 (fused_mul_recurrent_rwkv7, token
    shift, fused mixes, k update, l2norm, GroupNorm/LayerNorm, the gate/bonus term: all of fla's Triton helpers)."""
    import importlib
    assert_matches_oracle(importlib.import_module(f"family_cases.{family}").CASE.make_model(), tmp_path)


def assert_matches_oracle(model, tmp_path):
    """The model's full forward and a two-token decode with cache, on the CPU path and in fla's interpreted kernels:
    logits and every layer's recurrent state within 1e-4 relative."""
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(3))
    torch.save(ids, tmp_path / "ids.pt")
    run = subprocess.run([sys.executable, str(ORACLE), str(tmp_path), str(tmp_path / "ids.pt"),
                          str(tmp_path / "oracle.pt")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    oracle = torch.load(tmp_path / "oracle.pt", weights_only=True)
    full, steps, cache = decoded(model, ids, 22)
    assert rel(full.logits, oracle["logits"]) < 1e-4
    assert rel(steps, oracle["decode_logits"]) < 1e-4
    for i in range(len(oracle["states"])):
        assert rel(full.past_key_values[i]["recurrent_state"], oracle["states"][i]) < 1e-4
        assert rel(cache[i]["recurrent_state"], oracle["decode_states"][i]) < 1e-4
