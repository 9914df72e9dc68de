"""fla DeltaNet (`delta_net`; per-layer pruned `pruned_delta_net`; hybrids via the config's `attn`): no decay gate."""
from __future__ import annotations

from analysis.archs.base import FamilySpec
from analysis.archs.fla_shared.adapter import FLA_LORA, FLA_SIZES, FlaAdapter, config_with_expand_k, fla_training_kwargs

SPEC = FamilySpec(
    family="delta_net", label="DeltaNet", own_types=("delta_net",), kernel="delta_rule",
    entry_points=("chunk_delta_rule", "fused_recurrent_delta_rule"),   # fla/layers/delta_net.py
    sizes=FLA_SIZES, lora_projections=FLA_LORA)


class DeltaNetAdapter(FlaAdapter):
    def training_config(self, cfg, vocab_size: int):
        from fla.models import DeltaNetConfig
        expand = cfg.heads * cfg.head_dim / cfg.hidden_size
        return DeltaNetConfig(expand_k=expand, expand_v=expand, **fla_training_kwargs(cfg, vocab_size))

    def own_config_with_key_dim(self, config: dict, key_dim: int):
        from fla.models import DeltaNetConfig
        return config_with_expand_k(DeltaNetConfig, config, key_dim)


ADAPTER = DeltaNetAdapter(SPEC, linear_class="fla.layers:DeltaNet",
                          pruned_config_class="analysis.archs.fla_shared.pruned:PrunedDeltaNetConfig")
