"""fla Gated Linear Attention (GLA, `gla`; per-layer pruned `pruned_gla`; hybrids via the config's `attn`).

Linear attention with one decay per key channel and no delta rule (Yang et al. 2023, fla/layers/gla.py):
    S_t = Diag(e^{g_t}) S_{t−1} + k_t v_tᵀ,   o_t = dk^-1/2 · S_tᵀ q_t
with q, k, v = (optional SiLU short conv of) their projections, optionally a feature map on q and k (no l2 norm),
and g = logsigmoid(gk_proj x) / gate_logit_normalizer (clamped below at clamp_min if set), gk_proj a low-rank pair
of linears whose last one has one row per head and key channel. fla keeps the state V-first (`state_v_first`);
the project K-first. The output goes through a per-head RMSNorm (gated by SiLU(g_proj x) by default), then o_proj.

Pruning a key channel removes its q/k rows (and conv channels) and its decay rows (`gk_proj.1` weight and bias), as
for KDA: a zeroed q/k channel leaves its state row at zero whatever its decay. PCA is refused: a rotated channel
mixes channels that decay at different rates. GLA's `num_kv_heads` (fewer key/value heads than query heads) is
refused in one sentence: its query heads outnumber its key heads, the reverse of the grouping the core models.
"""
from __future__ import annotations

import torch.nn as nn

from analysis.archs.base import Block, ChannelRows, FamilySpec, HeadRows, head_blocks
from analysis.archs.fla_shared.adapter import (FLA_LORA, FLA_SIZES, FlaAdapter, config_with_expand_k, fla_blocks,
                                         fla_config_refusal)
from analysis.errors import AnalysisError

SPEC = FamilySpec(
    family="gla", label="Gated Linear Attention", own_types=("gla",), kernel="gla",
    entry_points=("chunk_gla", "fused_recurrent_gla"),   # fla/layers/gla.py
    sizes=FLA_SIZES, lora_projections=FLA_LORA,
    rotations=False,            # one decay per key channel
    qk_l2_normalised=False)     # q and k enter the recurrence raw (a feature map at most)


class GLAAdapter(FlaAdapter):
    def config_refusal(self, config: dict, where: str) -> str | None:
        heads, kv_heads = config.get("num_heads"), config.get("num_kv_heads")
        if kv_heads is not None and kv_heads != heads:
            return (f"{where} sets num_kv_heads to {kv_heads}, fewer key/value heads than its {heads} query heads; "
                    "the tool measures and prunes GLA models whose queries and keys have the same heads only.")
        return fla_config_refusal(config, where)

    def blocks(self, model) -> list[Block]:
        out = fla_blocks(model, self.linear_class())
        for block in out:
            if block.kind == "linear" and block.module.num_kv_heads != block.module.num_heads:
                raise AnalysisError(f"This GLA model shares {block.module.num_kv_heads} key/value heads among "
                                    f"{block.module.num_heads} query heads (num_kv_heads); the tool measures and "
                                    "prunes GLA models whose queries and keys have the same heads only.")
        return out

    def channel_rows(self, layer: nn.Module) -> list[ChannelRows]:
        """q/k projections and convs (FlaAdapter), then the decay rows: gk_proj's last linear, H·dk rows."""
        rows = super().channel_rows(layer) + [ChannelRows("gk_proj.1.weight", "gate")]
        if layer.gk_proj[1].bias is not None:
            rows.append(ChannelRows("gk_proj.1.bias", "gate"))
        return rows

    def head_rows(self, layer: nn.Module) -> list[HeadRows]:
        """FlaAdapter's (q/k/v rows and convs, output gate, o_proj columns), then the decay rows of each head:
        gk_proj's last linear, dk rows per head (weight and bias). Queries and keys share heads (blocks() refuses
        num_kv_heads), so every head is a key and a value head."""
        rows = super().head_rows(layer)
        last = layer.gk_proj[1]
        return rows + [head_blocks(f"gk_proj.1.{p}", "key", layer.num_heads, layer.head_k_dim)
                       for p in ("weight", "bias") if getattr(last, p, None) is not None]

    def set_head_counts(self, layer: nn.Module, key_heads: int, value_heads: int, original) -> None:
        layer.num_heads = layer.num_kv_heads = value_heads
        layer.key_dim = layer.key_dim_per_group = value_heads * layer.head_k_dim
        layer.value_dim = layer.value_dim_per_group = value_heads * layer.head_v_dim

    def own_config_with_key_dim(self, config: dict, key_dim: int):
        from fla.models import GLAConfig
        return config_with_expand_k(GLAConfig, config, key_dim)


ADAPTER = GLAAdapter(SPEC, linear_class="fla.layers.gla:GatedLinearAttention",
                     pruned_config_class="analysis.archs.gla.pruned:PrunedGLAConfig")
