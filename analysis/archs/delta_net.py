"""fla DeltaNet (`delta_net`; per-layer pruned `pruned_delta_net`; hybrids via the config's `attn`): no decay gate."""
from __future__ import annotations

from analysis.archs.fla_common import FlaAdapter


class DeltaNetAdapter(FlaAdapter):
    family = "delta_net"
    label = "DeltaNet"
    model_types = ("delta_net", "pruned_delta_net")
    gate = "none"
    kernel = "delta_rule"

    def linear_class(self) -> type:
        from fla.layers import DeltaNet
        return DeltaNet

    def pruned_config_class(self) -> type:
        from analysis.archs.fla_pruned import PrunedDeltaNetConfig
        return PrunedDeltaNetConfig

    def own_config_with_key_dim(self, config: dict, key_dim: int):
        """DeltaNet's key dim is hidden_size·expand_k / num_heads: expressible when that rounds back exactly."""
        from fla.models import DeltaNetConfig
        expand_k = key_dim * config["num_heads"] / config["hidden_size"]
        if round(config["hidden_size"] * expand_k) != key_dim * config["num_heads"]:
            return None
        return DeltaNetConfig(**{**config, "expand_k": expand_k})


ADAPTER = DeltaNetAdapter()
