"""Registry of family adapters (see analysis/archs/base.py for the interface).

Adding a family = one module here defining `ADAPTER` (an `Adapter` instance), its CPU op if it needs one,
and one line in FAMILIES. Modules are imported only when a model of that family is met, so importing
the registry stays cheap (no fla, no transformers).
"""
from __future__ import annotations

import importlib

from analysis.archs.base import Adapter, Block, ChannelRows, HeadRows  # noqa: F401  (re-exported)
from analysis.errors import AnalysisError

# family -> (module defining ADAPTER, config model_types it handles)
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kda": ("analysis.archs.kda", ("kda", "pruned_kda")),
    "delta_net": ("analysis.archs.delta_net", ("delta_net", "pruned_delta_net")),
    "gated_deltanet": ("analysis.archs.gated_deltanet", ("gated_deltanet", "pruned_gated_deltanet")),
    "qwen3_5": ("analysis.archs.qwen3_5", ("qwen3_5_text", "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe", "qwen3_next",
                                           "olmo_hybrid", "pruned_qwen3_5_text", "pruned_qwen3_5_moe_text",
                                           "pruned_qwen3_next", "pruned_olmo_hybrid")),
    "kimi_linear": ("analysis.archs.kimi_linear", ("kimi_linear", "pruned_kimi_linear")),
    "gla": ("analysis.archs.gla", ("gla", "pruned_gla")),
    "rwkv7": ("analysis.archs.rwkv7", ("rwkv7", "pruned_rwkv7")),
    "mamba2": ("analysis.archs.mamba2", ("mamba2", "nemotron_h", "granitemoehybrid", "falcon_h1", "bamba", "zamba2",
                                         "pruned_mamba2", "pruned_nemotron_h", "pruned_granitemoehybrid",
                                         "pruned_falcon_h1", "pruned_bamba", "pruned_zamba2")),
}

# model types that look close to a family but cannot be one: why, in words (the sentence adapter_for gives)
_MAMBA1 = ("is a Mamba-1 model: its selective scan keeps a diagonal state per channel, with no per-head B/C split "
           "into query/key channels, so it has no key dimension to measure or prune")
UNSUPPORTED = {"mamba": _MAMBA1, "jamba": _MAMBA1, "falcon_mamba": _MAMBA1}

# families `python -m analysis train` can build from scratch (their adapters implement `training_config`)
TRAINABLE = ("delta_net", "gated_deltanet", "qwen3_5", "mamba2")


def model_type_of(model_or_config) -> str:
    config = getattr(model_or_config, "config", model_or_config)
    return config["model_type"] if isinstance(config, dict) else getattr(config, "model_type", None)


def family_of(model_type: str) -> str | None:
    return next((f for f, (_, types) in FAMILIES.items() if model_type in types), None)


def supported_model_types() -> list[str]:
    return [t for _, types in FAMILIES.values() for t in types]


def get_adapter(family: str) -> Adapter:
    return importlib.import_module(FAMILIES[family][0]).ADAPTER


def adapter_for(model_or_config) -> Adapter:
    """The adapter of a model, a config or a config dict; one sentence when no family handles it."""
    model_type = model_type_of(model_or_config)
    family = family_of(model_type)
    if isinstance(model_type, str) and model_type in UNSUPPORTED:
        raise AnalysisError(f"Model type {model_type!r} {UNSUPPORTED[model_type]}; pick a Mamba-2 or "
                            "linear-attention model instead.")
    if family is None:
        raise AnalysisError(f"No adapter handles model type {model_type!r}; supported families: "
                            f"{', '.join(FAMILIES)} (model types {', '.join(supported_model_types())}).")
    return get_adapter(family)


def install_all() -> None:
    """Route every family's kernel entry points by device and register its model types (idempotent)."""
    for family in FAMILIES:
        get_adapter(family).install_routing()
