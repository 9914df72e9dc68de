"""The one maker of pruned_<type> for families built on transformers' own classes (Qwen3.5's, Mamba-2's).

A pruned type is the family's own config and causal-LM classes, found through transformers' auto mappings (so no
family keeps a table of class names), subclassed with model type `pruned_type(own)` and an `__init__` that, after the
family's own, resizes each layer for its per-layer dims read from the config (`after_init`); the weights are loaded
afterwards. Both classes are registered with transformers' Auto classes, so `from_pretrained` loads a saved prune.
"""
from __future__ import annotations

from typing import Callable

from analysis.archs.base import pruned_type


def make_pruned_type(own_type: str, after_init: Callable, members: Callable[[type], dict] | None = None
                     ) -> tuple[type, type]:
    """Register pruned_<own_type> and return its (config class, causal-LM class); `members(base_model_class)` adds
    methods to the model class. Raises KeyError when this transformers has no `own_type`."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
    base_cfg = CONFIG_MAPPING[own_type]
    base_model = MODEL_FOR_CAUSAL_LM_MAPPING[base_cfg]
    cfg_cls = type(f"Pruned{base_cfg.__name__}", (base_cfg,), {"model_type": pruned_type(own_type)})

    def __init__(self, config):
        base_model.__init__(self, config)
        after_init(self)
    model_cls = type(f"Pruned{base_model.__name__}", (base_model,),
                     {"config_class": cfg_cls, "__init__": __init__, **(members(base_model) if members else {})})
    AutoConfig.register(cfg_cls.model_type, cfg_cls, exist_ok=True)
    AutoModelForCausalLM.register(cfg_cls, model_cls, exist_ok=True)
    return cfg_cls, model_cls
