"""A family case made deeper: the same config with its layer pattern repeated, for tests that need a model several
times larger than one of its layers (a streamed model's memory budget sits between the two).

Generic over families: config fields that name a kind or a size per layer (layer_types, mlp_layer_types,
layers_block_type, RWKV-7's value_dim, ...) or spell one character per layer (Nemotron-H's hybrid_override_pattern) are repeated;
lists of layer indices (fla's attn["layers"], Bamba's attn_layer_indices) are repeated with an offset.
"""
from __future__ import annotations

import torch


def _repeat(value, layers: int, times: int, key: str = ""):
    per_layer = all(isinstance(v, str) for v in value) or all(type(v) is int for v in value) \
        if isinstance(value, list) else False
    if per_layer and len(value) == layers and not key.endswith(("indices", "ids", "layers")):
        return value * times
    if isinstance(value, str) and len(value) == layers and "pattern" in key:
        return value * times
    if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                                 for i in value) and key.endswith(("indices", "ids", "layers")):
        return [i + k * layers for k in range(times) for i in value]
    if isinstance(value, dict):
        return {k: _repeat(v, layers, times, k) for k, v in value.items()}
    return value


def deeper_config(config, times: int):
    """The transformers config of `config` (a model's) with every per-layer setting repeated `times` times."""
    from transformers import AutoConfig
    values = config.to_dict()
    layers = config.num_hidden_layers  # Nemotron-H derives it from its per-layer list
    deep = {k: _repeat(v, layers, times, k) for k, v in values.items()}
    if "num_hidden_layers" in values:
        deep["num_hidden_layers"] = layers * times
    return AutoConfig.for_model(**{k: v for k, v in deep.items() if k != "model_type"}, model_type=values["model_type"])


def deeper_model(model, times: int, seed: int = 0):
    """A seeded random-init fp32 model like `model` with `times` as many layers (eval mode)."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(deeper_config(model.config, times)).float().eval()
