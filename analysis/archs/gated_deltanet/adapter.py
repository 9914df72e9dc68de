"""fla Gated DeltaNet (`gated_deltanet`; per-layer pruned `pruned_gated_deltanet`; hybrids via `attn`).

One log-decay per (token, value head); value heads may outnumber key heads (`num_v_heads`): grouped."""
from __future__ import annotations

from analysis.archs.base import FamilySpec
from analysis.archs.fla_shared.adapter import FLA_LORA, FLA_SIZES, FlaAdapter, fla_training_kwargs

SPEC = FamilySpec(
    family="gated_deltanet", label="Gated DeltaNet", own_types=("gated_deltanet",), kernel="gated_delta_rule",
    entry_points=("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"),   # fla/layers/gated_deltanet.py
    sizes=FLA_SIZES, lora_projections=FLA_LORA)


class GatedDeltaNetAdapter(FlaAdapter):
    def training_config(self, cfg, vocab_size: int):
        from fla.models import GatedDeltaNetConfig
        return GatedDeltaNetConfig(head_dim=cfg.head_dim, expand_v=1.0, **fla_training_kwargs(cfg, vocab_size))

    def install_routing(self) -> None:
        from analysis.archs.fla_shared import pruned  # noqa: F401  (registers pruned_delta_net, pruned_gated_deltanet)
        from analysis.archs.fla_shared.adapter import install_fla_routing
        from analysis.runtime import backend
        import fla.layers.gated_deltanet as layer_file
        install_fla_routing()
        backend.route_entry_points(layer_file, self.entry_points, self.kernel_spec.recurrence,
                                   dispatched={"chunk_gated_delta_rule": "gated_delta_rule"})  # fla's registry
        backend.route(layer_file, ("causal_conv1d",), wrap=backend.conv_by_device)  # its fused q|k|v conv path

    def own_config_with_key_dim(self, config: dict, key_dim: int):
        """Gated DeltaNet's config holds the key dim itself (head_dim); the value dim is head_dim·expand_v, so
        it stays only where expand_v is rescaled to keep it exactly."""
        from fla.models import GatedDeltaNetConfig
        head_v = int(config["head_dim"] * config["expand_v"])
        expand_v = head_v / key_dim
        if int(key_dim * expand_v) != head_v:
            return None
        return GatedDeltaNetConfig(**{**config, "head_dim": key_dim, "expand_v": expand_v})


ADAPTER = GatedDeltaNetAdapter(SPEC, linear_class="fla.layers:GatedDeltaNet",
                               pruned_config_class="analysis.archs.fla_shared.pruned:PrunedGatedDeltaNetConfig")
