"""fla's Kimi Delta Attention (KDA, `kda`): a delta rule whose decay is per key channel.

    S_t = (I − β_t k_t k_tᵀ) Diag(exp g_t) S_{t−1} + β_t k_t v_tᵀ,   o_t = dk^-1/2 · S_tᵀ q_t
with q, k = l2norm(SiLU(conv(W x))), β = sigmoid(b_proj x) (×2 with negative eigenvalues) and
g = −e^{A_log}·softplus(f_proj x + dt_bias) (or lower_bound·sigmoid(e^{A_log}(f_proj x + dt_bias)) when the
config sets a lower bound), g per value head and key channel. Key heads Hk = num_heads, value heads
Hv = num_v_heads (a multiple of Hk): value head j reads key head j // (Hv/Hk).

Pruning a key channel removes its q/k rows and its decay rows (f_proj's last linear and dt_bias, in every
value head the key head serves): a zeroed q/k channel leaves its state row at zero whatever its decay, so
the decay channel is dead weight. Rotations (PCA) are refused: a rotated channel mixes channels that decay
at different rates, and no single decay row can carry that.
"""
from __future__ import annotations

import math

import torch.nn as nn

from analysis.archs.base import Adapter, Block, ChannelRows, FamilySpec, HeadRows, classify_blocks, head_blocks
from analysis.archs.fla_shared.adapter import FLA_LORA, FLA_SIZES, FlaAdapter
from analysis.archs.heads import head_config_fields
from analysis.errors import AnalysisError


SPEC = FamilySpec(
    family="kda", label="Kimi Delta Attention", own_types=("kda",), kernel="kda",
    entry_points=("chunk_kda", "fused_recurrent_kda"),   # fla/layers/kda.py
    sizes=FLA_SIZES, lora_projections=FLA_LORA,
    rotations=False)            # one decay per key channel


class KDAAdapter(Adapter):
    # --- structure -------------------------------------------------------------------------------
    def blocks(self, model) -> list[Block]:
        from fla.layers.attn import Attention
        from fla.layers.kda import KimiDeltaAttention
        kinds = ((KimiDeltaAttention, "linear"), (Attention, "softmax"))
        return classify_blocks([b.attn for b in model.model.layers], kinds)

    def channel_rows(self, layer: nn.Module) -> list[ChannelRows]:
        """q/k projections, their short convs, then the decay rows (Hv·dk rows: value head j, channel i)."""
        rows = [ChannelRows("q_proj.weight", "q"), ChannelRows("k_proj.weight", "k")]
        for role in ("q", "k"):
            conv = getattr(layer, f"{role}_conv1d", None)
            if conv is not None:
                rows.append(ChannelRows(f"{role}_conv1d.weight", role, conv=True))
                if conv.bias is not None:
                    rows.append(ChannelRows(f"{role}_conv1d.bias", role, conv=True))
        return rows + [ChannelRows("f_proj.1.weight", "gate"), ChannelRows("dt_bias", "gate")]

    def head_rows(self, layer: nn.Module) -> list[HeadRows]:
        """q/k rows and conv channels per key head; per value head: v rows and conv channels, the decay rows (the
        gate projection's last linear and dt_bias, dk each), β, A_log, the output gate's last linear (weight and
        bias) and the o_proj input columns. The gate projections' first (low-rank) linears serve every head."""
        hk, hv, dk, dv = layer.num_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
        rows = []
        for name, role, heads, width in (("q", "key", hk, dk), ("k", "key", hk, dk), ("v", "value", hv, dv)):
            rows.append(head_blocks(f"{name}_proj.weight", role, heads, width))
            conv = getattr(layer, f"{name}_conv1d", None)
            if conv is not None:
                rows += [head_blocks(f"{name}_conv1d.{p}", role, heads, width) for p in ("weight", "bias")
                         if getattr(conv, p, None) is not None]
        rows += [head_blocks("f_proj.1.weight", "value", hv, dk), head_blocks("dt_bias", "value", hv, dk),
                 head_blocks("b_proj.weight", "value", hv, 1), head_blocks("A_log", "value", hv, 1),
                 head_blocks("g_proj.1.weight", "value", hv, dv)]
        if layer.g_proj[1].bias is not None:
            rows.append(head_blocks("g_proj.1.bias", "value", hv, dv))
        return rows + [head_blocks("o_proj.weight", "value", hv, dv, dim=1)]

    def set_head_counts(self, layer: nn.Module, key_heads: int, value_heads: int, original) -> None:
        layer.num_heads, layer.num_v_heads = key_heads, value_heads
        layer.key_dim, layer.value_dim = key_heads * layer.head_k_dim, value_heads * layer.head_v_dim
        layer.gate_dim = value_heads * layer.head_k_dim

    softmax_cache_bytes = FlaAdapter.softmax_cache_bytes   # fla's Attention, as in the fla hybrids
    config_refusal = FlaAdapter.config_refusal

    # --- pruning ---------------------------------------------------------------------------------

    def check_config(self, config) -> None:
        """One sentence for a KDA config the kernels (or fla's layer) cannot hold."""
        heads, v_heads = config.num_heads, config.num_v_heads or config.num_heads
        if v_heads % heads:
            raise AnalysisError(f"num_v_heads={v_heads} is not a multiple of num_heads={heads}; KDA's grouped "
                                "value attention needs each key head to serve the same number of value heads.")
        dims = getattr(config, "head_k_dims", None) or [config.head_dim]
        self.check_key_dims(dims)

    def own_config_holds(self, config, dk: int) -> bool:
        """Can KDAConfig say key dim dk with the value dim unchanged (head_dim=dk, expand_v=dv/dk)?"""
        dv = int(config.head_dim * config.expand_v)
        expand = dv / dk
        return int(dk * expand) == dv and math.isclose(dk * expand, dv, rel_tol=1e-5)

    def pruned_model(self, model, key_dims: list[int], readout_key_dims: list[int] | None, head_counts=None):
        from transformers import AutoModelForCausalLM

        from analysis.archs.kda.pruned import PrunedKDAConfig, kda_layers
        from fla.models import KDAConfig
        layers = kda_layers(model)
        dims = [int(d) for d in key_dims]
        if len(dims) != len(layers):
            raise AnalysisError(f"Got {len(dims)} key dims for a model with {len(layers)} KDA layers; "
                                "give one per KDA layer.")
        self.check_key_dims(dims)
        base = {k: v for k, v in model.config.to_dict().items()
                if k not in ("model_type", "architectures", "head_k_dims", "readout_key_dims")}
        heads = head_config_fields(model, self, head_counts)
        base.update(heads)
        dv = layers[0].head_v_dim
        uniform = len(set(dims)) == 1 and all(a.head_v_dim == dv for a in layers)
        plain_readout = readout_key_dims is None or list(readout_key_dims) == dims
        if uniform and plain_readout and not heads and self.own_config_holds(model.config, dims[0]):
            config = KDAConfig(**{**base, "head_dim": dims[0], "expand_v": dv / dims[0]})
        else:
            readout = None if readout_key_dims is None else [int(d) for d in readout_key_dims]
            config = PrunedKDAConfig(**{**base, "head_k_dims": dims, "readout_key_dims": readout})
        param = next(model.parameters())
        return AutoModelForCausalLM.from_config(config).to(device=param.device, dtype=param.dtype).eval()

    # --- devices ---------------------------------------------------------------------------------
    def install_routing(self) -> None:
        """chunk_kda through fla's dispatch registry (analysis.runtime.fla_dispatch), fused_recurrent_kda (which fla
        does not dispatch) as fla/layers/kda.py looks it up, through backend.route_recurrence.

        The layer's other ops (ShortConvolution, FusedRMSNormGated with sigmoid, RMSNorm, SwiGLU, fused
        cross-entropy) are the ones analysis.runtime.backend.install() already routes."""
        from analysis.runtime import backend
        from analysis.archs.kda import pruned  # noqa: F401  (registers pruned_kda with transformers)
        backend.install()
        import fla.layers.kda as kda_layer
        backend.route_entry_points(kda_layer, self.entry_points, self.kernel_spec.recurrence,
                                   dispatched={"chunk_kda": None})   # fla's registry; fused_recurrent_kda patched


ADAPTER = KDAAdapter(SPEC)
