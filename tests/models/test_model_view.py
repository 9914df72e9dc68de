"""Issue 20 item 3: a model's structure as its adapter sees it (linear layers, key/value heads and dims, blocks,
state bytes) is read once per model and device/dtype, then shared by every core function down a prune and a
measurement, instead of being re-derived at each call."""
from __future__ import annotations

import torch

from analysis.evaluate.measure import Evaluation, measure
from analysis.models import layers, load
from analysis.models.load import describe, load_tokenizer
from analysis.shrink.prune import prune
from analysis.models.key_plan import plan_key_dims
from family_cases.text_lm import build_tiny


def test_a_prune_and_its_measurements_read_each_models_structure_once(monkeypatch):
    reads = {"layers": [], "describe": []}
    read_layers, read_description = layers._read_layers, load._describe

    def counted_layers(model):
        reads["layers"].append(id(model))
        return read_layers(model)

    def counted_description(model):
        reads["describe"].append(id(model))
        return read_description(model)
    monkeypatch.setattr(layers, "_read_layers", counted_layers)
    monkeypatch.setattr(load, "_describe", counted_description)
    model, tok = build_tiny("delta_net"), load_tokenizer("deltanet-small")
    result = prune(model, "l1", plan_key_dims(model, ratio=0.5))
    for m in (model, result.model):
        measure(m, tok, Evaluation("test", context=32, max_tokens=64, latency=False))
    assert describe(model).head_k_dims != describe(result.model).head_k_dims   # two models, two views
    for what, ids in reads.items():
        assert sorted(set(ids)) == sorted({id(model), id(result.model)}) and len(ids) == 2, (what, ids)


def test_the_view_is_read_again_when_the_model_moves_to_another_dtype():
    model = build_tiny("gated_deltanet")
    first = describe(model)
    assert describe(model) is first                                  # the same object: read once
    model.to(torch.float64)
    moved = describe(model)
    assert moved is not first and moved.dtype != first.dtype
