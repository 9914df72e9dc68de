"""Registry of family adapters (see analysis/archs/base.py for the interface).

Adding a family = one folder `analysis/archs/<family>/` whose `__init__` exposes `ADAPTER` (an `Adapter` built on
the family's `FamilySpec`, which declares its model types), its CPU op if it needs one, and its name in FAMILIES.
Everything else here is read from the adapters. A family's folder is imported only when a model type is looked up, so
importing the registry stays cheap (no fla, no transformers).
"""
from __future__ import annotations

import importlib

from analysis.archs.base import (PRUNED_PREFIX, Adapter, Block, ChannelRows, FamilySpec,  # noqa: F401  (re-exported)
                                 HeadRows, LayerSizes, how_to_load, is_pruned_type, pruned_type)
from analysis.errors import AnalysisError

# the families, each a folder analysis/archs/<family>/ exposing ADAPTER
FAMILIES = ("kda", "delta_net", "gated_deltanet", "qwen3_5", "kimi_linear", "gla", "rwkv7", "mamba2")


# families `python -m analysis train` can build from scratch (their adapters implement `training_config`)
TRAINABLE = ("delta_net", "gated_deltanet", "qwen3_5", "mamba2")


def model_type_of(model_or_config) -> str:
    config = getattr(model_or_config, "config", model_or_config)
    return config["model_type"] if isinstance(config, dict) else getattr(config, "model_type", None)


def family_of(model_type: str) -> str | None:
    return next((f for f in FAMILIES if model_type in get_adapter(f).model_types), None)


def supported_model_types() -> list[str]:
    return [t for f in FAMILIES for t in get_adapter(f).model_types]


def get_adapter(family: str) -> Adapter:
    return importlib.import_module(f"analysis.archs.{family}").ADAPTER


def refusal(model_type) -> str | None:
    """Why a model type close to a family cannot be one, in words (a family's `refused_types`), else None."""
    return next((r for f in FAMILIES if (r := get_adapter(f).spec.refusal(model_type))), None)


def check_not_refused(model_type, where: str = "") -> None:
    """One sentence for a model type close to a family that no adapter can handle (`where`: " in <file>")."""
    if isinstance(model_type, str) and (why := refusal(model_type)):
        raise AnalysisError(f"Model type {model_type!r}{where} {why}; pick a Mamba-2 or "
                            "linear-attention model instead.")


def adapter_for(model_or_config) -> Adapter:
    """The adapter of a model, a config or a config dict; one sentence when no family handles it."""
    model_type = model_type_of(model_or_config)
    family = family_of(model_type)
    check_not_refused(model_type)
    if family is None and is_pruned_type(str(model_type)):   # another version's prune, or an unknown family's
        raise AnalysisError(f"This version of the dashboard does not have {model_type!r}; {how_to_load(model_type)}")
    if family is None:
        raise AnalysisError(f"No adapter handles model type {model_type!r}; supported families: "
                            f"{', '.join(FAMILIES)} (model types {', '.join(supported_model_types())}).")
    return get_adapter(family)


def install_all() -> None:
    """Route every family's kernel entry points by device and register its model types (idempotent)."""
    for family in FAMILIES:
        get_adapter(family).install_routing()
