"""transformers' Kimi Linear (`kimi_linear`): Kimi Delta Attention (KDA) blocks + MLA softmax-attention blocks.

Each decoder block's `self_attn` is a `KimiLinearDeltaAttention` (`layer_types[i] == "linear_attention"`) or a
`KimiLinearAttention` (DeepSeek-style multi-head latent attention, "full_attention"; labelled softmax, never
pruned). A KDA layer has H heads of one `linear_head_dim` d for q, k and v (no grouped value heads):
    q, k, v = SiLU(causal depthwise conv over [q_proj x | k_proj x | v_proj x]),  q, k l2-normalised in the kernel,
    g = −e^{A_log}·softplus(f_b_proj(f_a_proj x) + dt_bias)   per head and key channel (computed before the kernel),
    β = sigmoid(b_proj x),
    S_t = (I − β_t k_t k_tᵀ) Diag(e^{g_t}) S_{t−1} + β_t k_t v_tᵀ,   o_t = d^-1/2 · S_tᵀ q_t,
then a gated RMSNorm per head (o_norm, sigmoid gate g_b_proj(g_a_proj x)) and o_proj.

The recurrence goes through two module globals of transformers' modeling file, `chunk_kimi_delta_attention`
and `recurrent_kimi_delta_attention` (decode), which transformers binds to fla's `chunk_kda` /
`fused_recurrent_kda` whenever fla is importable — Triton kernels that crash on CPU. `install_routing`
replaces both: CUDA tensors keep the bound kernel, CPU tensors take `analysis.runtime.backend`'s torch recurrence
(per-key-channel g), and on both the observer sees q/k per key head. The short conv and the gated norm take
torch unless the `kernels` hub or `causal_conv1d` is installed (this project installs neither).

Pruning a key channel removes its q/k rows, its conv rows and its decay rows (f_b_proj rows and dt_bias), as for
fla KDA; PCA is refused (a rotated channel would mix channels that decay at different rates). The family's
config has one head dim for keys and values, so every prune is saved as `pruned_kimi_linear`
(analysis/archs/kimi_linear/pruned.py).
"""
from __future__ import annotations

import copy
import importlib

import torch
import torch.nn as nn

from analysis.archs.base import (Adapter, Block, ChannelRows, FamilySpec, HeadRows, LayerSizes, classify_blocks,
                                 head_blocks)
from analysis.archs.heads import head_config_fields
from analysis.archs.kimi_linear.routing import ENTRY_POINTS, MODELING
from analysis.errors import AnalysisError


SPEC = FamilySpec(
    family="kimi_linear", label="Kimi Linear (Kimi Delta Attention + MLA)", own_types=("kimi_linear",), kernel="kda",
    entry_points=ENTRY_POINTS,
    sizes=LayerSizes(key_heads="num_heads", value_heads="num_heads", key_dim=("head_k_dim", "head_dim"),
                     value_dim="head_dim"),   # one head count and (unpruned) one head dim for q, k and v
    lora_projections=("q_proj", "k_proj", "v_proj"),  # the reference's LoRA targets
    key_dims_config_key="linear_key_head_dims",
    rotations=False)            # one decay per key channel


class KimiLinearAdapter(Adapter):
    # --- structure -------------------------------------------------------------------------------
    def blocks(self, model) -> list[Block]:
        modeling = importlib.import_module(MODELING)
        kinds = ((modeling.KimiLinearDeltaAttention, "linear"), (modeling.KimiLinearAttention, "softmax"))
        return classify_blocks([b.self_attn for b in model.model.layers], kinds)

    def channel_rows(self, layer: nn.Module) -> list[ChannelRows]:
        """q/k projections, the q and k parts of the one q|k|v conv, then the decay rows (H·dk, head-major)."""
        keys = layer.num_heads * self.key_dim(layer)
        rows = [ChannelRows("q_proj.weight", "q"), ChannelRows("k_proj.weight", "k"),
                ChannelRows("conv1d.weight", "q", 0, conv=True), ChannelRows("conv1d.weight", "k", keys, conv=True)]
        if layer.conv1d.bias is not None:
            rows += [ChannelRows("conv1d.bias", "q", 0, conv=True), ChannelRows("conv1d.bias", "k", keys, conv=True)]
        return rows + [ChannelRows("forget_gate.f_b_proj.weight", "gate"), ChannelRows("forget_gate.dt_bias", "gate")]

    def head_rows(self, layer: nn.Module) -> list[HeadRows]:
        """Every head is a key and a value head: its q/k/v rows and conv channels, decay rows (f_b_proj, dt_bias),
        A_log, β, output-gate rows (g_b_proj) and o_proj input columns. The low-rank f_a_proj / g_a_proj serve
        every head and stay."""
        heads, dk, dv = layer.num_heads, self.key_dim(layer), self.value_dim(layer)
        rows = [head_blocks("q_proj.weight", "key", heads, dk), head_blocks("k_proj.weight", "key", heads, dk),
                head_blocks("v_proj.weight", "value", heads, dv)]
        conv = [head_blocks("conv1d.weight", "key", heads, dk), head_blocks("conv1d.weight", "key", heads, dk, heads * dk),
                head_blocks("conv1d.weight", "value", heads, dv, 2 * heads * dk)]
        if layer.conv1d.bias is not None:
            conv += [HeadRows("conv1d.bias", r.role, r.starts, r.width) for r in conv]
        gate = layer.forget_gate.head_dim
        return rows + conv + [
            head_blocks("forget_gate.f_b_proj.weight", "value", heads, gate),
            head_blocks("forget_gate.dt_bias", "value", heads, gate),
            head_blocks("forget_gate.A_log", "value", heads, 1, dim=2),    # [1, 1, H, 1]
            head_blocks("b_proj.weight", "value", heads, 1), head_blocks("g_b_proj.weight", "value", heads, dv),
            head_blocks("o_proj.weight", "value", heads, dv, dim=1)]

    def set_head_counts(self, layer: nn.Module, key_heads: int, value_heads: int, original) -> None:
        layer.num_heads = layer.forget_gate.num_heads = value_heads
        layer.qkv_dim = value_heads * layer.head_dim
        layer.forget_gate.qkv_dim = value_heads * layer.forget_gate.head_dim
        layer.conv_dim = 2 * value_heads * self.key_dim(layer) + layer.qkv_dim

    def softmax_cache_bytes(self, module: nn.Module, tokens: int, dtype_bytes: int) -> int:
        """MLA caches the compressed latent (kv_lora_rank) and the shared rope key (qk_rope_head_dim), one head."""
        return tokens * (module.kv_lora_rank + module.qk_rope_head_dim) * dtype_bytes

    def softmax_cache_note(self, module: nn.Module) -> str:
        return (f"MLA (multi-head latent attention): caches a {module.kv_lora_rank}-dim latent + "
                f"{module.qk_rope_head_dim}-dim rope key per token; not pruned")

    # --- pruning ---------------------------------------------------------------------------------
    def pruned_model(self, model, key_dims: list[int], readout_key_dims: list[int] | None, head_counts=None):
        from analysis.archs.kimi_linear.pruned import PrunedKimiLinearConfig, PrunedKimiLinearForCausalLM
        layers = self.linear_layers(model)
        dims = [int(d) for d in key_dims]
        if len(dims) != len(layers):
            raise AnalysisError(f"Got {len(dims)} key dims for a model with {len(layers)} KDA layers; "
                                "give one per KDA layer.")
        self.check_key_dims(dims)
        readout = dims if readout_key_dims is None else [int(d) for d in readout_key_dims]  # None: dk'^-1/2
        values = {k: v for k, v in copy.deepcopy(model.config).to_dict().items()
                  if k not in ("model_type", "architectures", "linear_key_head_dims", "readout_key_dims")}
        config = PrunedKimiLinearConfig(**values)
        config.linear_key_head_dims = dims
        config.readout_key_dims = None if readout == dims else readout
        for key, value in head_config_fields(model, self, head_counts).items():
            setattr(config, key, value)
        config.architectures = [PrunedKimiLinearForCausalLM.__name__]
        param = next(model.parameters())
        with torch.device(param.device):
            pruned = PrunedKimiLinearForCausalLM(config).to(param.dtype)
        _match_dtypes(pruned, model)
        return pruned.eval()

    # --- devices ---------------------------------------------------------------------------------
    def shipped_parts(self, model):
        """A saved prune's modeling file carries the key-dim layer class (its forward views q/k at dk')."""
        from analysis.archs.kimi_linear.pruned import shipped_parts
        return shipped_parts()

    def install_routing(self) -> None:
        """Route transformers' two KDA entry points by device (idempotent); registers pruned_kimi_linear."""
        from analysis.archs.kimi_linear import routing
        if routing.install(self.kernel_spec.recurrence):  # an older transformers without Kimi Linear has nothing to route or register
            from analysis.archs.kimi_linear import pruned  # noqa: F401  (registers pruned_kimi_linear)


def _match_dtypes(pruned: nn.Module, model: nn.Module) -> None:
    """Give every tensor the original's dtype: transformers keeps dt_bias and the MoE router (weight, correction
    bias) in fp32 in a bf16 model, and a prune must copy the router's values bit for bit."""
    original = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for name, tensor in [*pruned.named_parameters(), *pruned.named_buffers()]:
        if name in original and tensor.dtype != original[name].dtype:
            tensor.data = tensor.data.to(original[name].dtype)


ADAPTER = KimiLinearAdapter(SPEC)
