"""Shared fixtures: tiny random-init fla models saved as real HF directories (safetensors)."""
from __future__ import annotations

import pytest
import torch

import analysis

analysis.ready()  # every test may build or load fla models (CPU path + the project's model types)

VOCAB = 8192  # the bundled tokenizer's size, so tiny models read real text


def tiny_config(kind: str, **overrides):
    from fla.models import DeltaNetConfig, GatedDeltaNetConfig
    common = dict(hidden_size=64, num_hidden_layers=2, num_heads=2, vocab_size=VOCAB, tie_word_embeddings=True)
    if kind == "delta_net":
        return DeltaNetConfig(**{**common, **overrides})
    return GatedDeltaNetConfig(**{**common, "head_dim": 32, "expand_v": 1.0, **overrides})


def build_tiny(kind: str, seed: int = 0, **overrides):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(kind, **overrides)).eval()


@pytest.fixture(scope="session", params=["delta_net", "gated_deltanet"])
def tiny_model_dir(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    build_tiny(request.param).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    dirs = {}
    for kind in ("delta_net", "gated_deltanet"):
        dirs[kind] = tmp_path_factory.mktemp(f"tiny-{kind}")
        build_tiny(kind).save_pretrained(dirs[kind])
    return dirs
