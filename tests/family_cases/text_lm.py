"""The tiny DeltaNet / Gated DeltaNet language models most tests use: the family cases resized to read real
text (the bundled tokenizer's vocabulary) — the same factory as the family tests, not a second one."""
from __future__ import annotations

import importlib

VOCAB = 8192  # the bundled tokenizer's size, so tiny models read real text

TEXT_SIZES = {  # what differs from the family case: the vocabulary, and one 32-wide key head per value head
    "delta_net": dict(vocab_size=VOCAB),
    "gated_deltanet": dict(vocab_size=VOCAB, num_v_heads=None, head_dim=32),
}


def tiny_config(kind: str, **overrides):
    return importlib.import_module(f"family_cases.{kind}").make_config(**{**TEXT_SIZES[kind], **overrides})


def build_tiny(kind: str, seed: int = 0, **overrides):
    """A seeded random-init fp32 CPU model in eval mode; `kind` is "delta_net" or "gated_deltanet"."""
    return importlib.import_module(f"family_cases.{kind}").make_model(seed, **{**TEXT_SIZES[kind], **overrides})
