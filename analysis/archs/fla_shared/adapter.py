"""What fla's DeltaNet and Gated DeltaNet families share: blocks (hybrids included), q/k rows, pruned models.

An fla model keeps its token mixers at `model.model.layers[i].attn`. A config's `attn` setting turns the
listed layers into fla's softmax `Attention` (a hybrid); every other block holds the family's linear layer.
fla's `Attention` needs flash-attn even to be built, and rotates q/k with a Triton kernel, so
`install_routing` gives both a torch path (SDPA / the rotary reference) for CPU tensors and, where
flash-attn is not installed, for CUDA tensors too; fla's own kernels run wherever they can.
"""
from __future__ import annotations

import torch
import torch.nn as nn

import importlib

from analysis.archs.base import Adapter, Block, ChannelRows, FamilySpec, HeadRows, LayerSizes, head_blocks
from analysis.archs.heads import head_config_fields

_routed = False
FLA_SIZES = LayerSizes(key_heads="num_heads", value_heads=("num_v_heads", "num_heads"), key_dim="head_k_dim",
                       value_dim="head_v_dim")   # fla's layers (num_v_heads: Gated DeltaNet's grouped value heads)
FLA_LORA = ("q_proj", "k_proj", "v_proj")        # the reference's LoRA targets


def fla_blocks(model, linear_cls: type) -> list[Block]:
    from fla.layers.attn import Attention
    out = []
    for i, block in enumerate(model.model.layers):
        mixer = block.attn
        kind = "linear" if isinstance(mixer, linear_cls) else "softmax" if isinstance(mixer, Attention) else "other"
        out.append(Block(index=i, kind=kind, module=mixer))
    return out


def softmax_layer_indices(config) -> set[int]:
    """Blocks an fla config's `attn` setting makes softmax attention (a config object or a dict)."""
    attn = config.get("attn") if isinstance(config, dict) else getattr(config, "attn", None)
    if not attn:
        return set()
    return {int(i) for spec in ([attn] if isinstance(attn, dict) else attn) for i in spec.get("layers", [])}


def load_class(where: str) -> type:
    """The class `module:Name`, imported only when asked for (the registry imports no fla)."""
    module, name = where.split(":")
    return getattr(importlib.import_module(module), name)


class FlaAdapter(Adapter):
    """Base of the fla families whose linear layer has q_proj/k_proj and optional q_conv1d/k_conv1d: the spec, the
    layer class and the per-layer pruned config class (each `module:Name`)."""

    def __init__(self, spec: FamilySpec, linear_class: str, pruned_config_class: str):
        super().__init__(spec)
        self.linear_class_at, self.pruned_config_class_at = linear_class, pruned_config_class

    def linear_class(self) -> type:
        return load_class(self.linear_class_at)

    def mlp_width(self, config) -> int:
        """fla's blocks size the MLP by intermediate_size, else hidden_ratio × hidden (fla's default ratio 4)."""
        hidden = int(config.hidden_size)
        return int(getattr(config, "intermediate_size", None) or hidden * (getattr(config, "hidden_ratio", None) or 4))

    def pruned_config_class(self) -> type:
        return load_class(self.pruned_config_class_at)

    def own_config_with_key_dim(self, config, key_dim: int):
        """The family's own config with every layer at `key_dim`, or None when it cannot say it exactly."""
        raise NotImplementedError

    def config_refusal(self, config: dict, where: str) -> str | None:
        return fla_config_refusal(config, where)

    # --- structure -------------------------------------------------------------------------------
    def blocks(self, model) -> list[Block]:
        return fla_blocks(model, self.linear_class())

    def channel_rows(self, layer: nn.Module) -> list[ChannelRows]:
        rows = [ChannelRows("q_proj.weight", "q"), ChannelRows("k_proj.weight", "k")]
        for role, name in (("q", "q_proj"), ("k", "k_proj")):
            if getattr(layer, name).bias is not None:
                rows.append(ChannelRows(f"{name}.bias", role))
        for role, name in (("q", "q_conv1d"), ("k", "k_conv1d")):
            conv = getattr(layer, name, None) if getattr(layer, "use_short_conv", False) else None
            if conv is not None:
                rows.append(ChannelRows(f"{name}.weight", role, conv=True))
                if conv.bias is not None:
                    rows.append(ChannelRows(f"{name}.bias", role, conv=True))
        return rows

    def head_rows(self, layer: nn.Module) -> list[HeadRows]:
        """q/k rows and conv channels per key head; v rows and conv channels, β (b_proj), the decay (a_proj,
        A_log, dt_bias: Gated DeltaNet), output-gate rows (g_proj) and o_proj input columns per value head."""
        hk, hv, dk, dv = self.key_heads(layer), self.value_heads(layer), self.key_dim(layer), self.value_dim(layer)
        rows = []
        for name, role, heads, width in (("q", "key", hk, dk), ("k", "key", hk, dk), ("v", "value", hv, dv)):
            for owner in (f"{name}_proj", f"{name}_conv1d" if getattr(layer, "use_short_conv", False) else None):
                module = getattr(layer, owner, None) if owner else None
                if module is not None:
                    rows += [head_blocks(f"{owner}.{p}", role, heads, width) for p in ("weight", "bias")
                             if getattr(module, p, None) is not None]
        for name in ("a_proj.weight", "b_proj.weight", "A_log", "dt_bias"):
            if _has(layer, name):
                rows.append(head_blocks(name, "value", hv, 1))
        if _has(layer, "g_proj.weight"):
            rows.append(head_blocks("g_proj.weight", "value", hv, dv))
        return rows + [head_blocks("o_proj.weight", "value", hv, dv, dim=1)]

    def set_head_counts(self, layer: nn.Module, key_heads: int, value_heads: int, original) -> None:
        layer.num_heads = key_heads
        if hasattr(layer, "num_v_heads"):
            layer.num_v_heads = value_heads
        layer.key_dim, layer.value_dim = key_heads * layer.head_k_dim, value_heads * layer.head_v_dim

    def softmax_cache_bytes(self, module: nn.Module, tokens: int, dtype_bytes: int) -> int:
        """fla's Attention caches k and v (num_kv_heads·head_dim each), only the last window_size tokens."""
        window = getattr(module, "window_size", None)
        kept = min(tokens, window) if window else tokens
        return 2 * module.num_kv_heads * module.head_dim * kept * dtype_bytes

    # --- pruning ---------------------------------------------------------------------------------
    def pruned_model(self, model, key_dims: list[int], readout_key_dims: list[int] | None, head_counts=None):
        from transformers import AutoModelForCausalLM
        base = {k: v for k, v in model.config.to_dict().items()
                if k not in ("model_type", "architectures", "head_k_dims", "readout_key_dims")}
        heads = head_config_fields(model, self, head_counts)
        config = None
        if readout_key_dims is None and len(set(key_dims)) == 1 and not heads:
            config = self.own_config_with_key_dim(base, key_dims[0])
        if config is None:
            config = self.pruned_config_class()(**{**base, **heads, "head_k_dims": list(key_dims),
                                                    "readout_key_dims": readout_key_dims})
        param = next(model.parameters())
        self.install_routing()
        return AutoModelForCausalLM.from_config(config).to(device=param.device, dtype=param.dtype).eval()

    # --- devices ---------------------------------------------------------------------------------
    def install_routing(self) -> None:
        """fla's shared ops, the family's pruned types (importing their module registers them) and its recurrence
        entry points as the layer's own file looks them up, routed by device."""
        from analysis.runtime import backend
        install_fla_routing()
        self.pruned_config_class()
        layer_file = importlib.import_module(self.linear_class().__module__)
        backend.route_recurrence(layer_file, self.entry_points, self.kernel_spec.recurrence)


def _has(layer: nn.Module, path: str) -> bool:
    try:
        layer.get_parameter(path)
    except AttributeError:
        return False
    return True


def fla_config_refusal(config: dict, where: str) -> str | None:
    """The fields of fla 0.6's shared config that the tool cannot run, in one sentence (docs/config-flags.md)."""
    if config.get("attnres_block_size") is not None:
        return (f"{where} sets attnres_block_size to {config['attnres_block_size']!r} (fla's attention residuals), "
                "which fla runs only as a CUDA Triton kernel and which feeds each block a learned mix of every earlier "
                "block's output, so its states and prunes are not what the tool measures; the tool reads fla models "
                "without attnres_block_size only.")
    if config.get("attn_mode") == "fused_chunk":
        return (f"{where} sets attn_mode to 'fused_chunk', a kernel fla 0.6 no longer has (on any device); set "
                "attn_mode to 'chunk', the same recurrence with the same weights, and load the model again.")
    return None


def config_with_expand_k(config_class: type, config: dict, key_dim: int):
    """DeltaNet's and GLA's own config at `key_dim`: their key dim is hidden_size·expand_k / num_heads, expressible
    when that rounds back exactly (else None)."""
    expand_k = key_dim * config["num_heads"] / config["hidden_size"]
    if round(config["hidden_size"] * expand_k) != key_dim * config["num_heads"]:
        return None
    return config_class(**{**config, "expand_k": expand_k})


def fla_training_kwargs(cfg, vocab_size: int) -> dict:
    """The config fields every fla family's training run shares (`cfg`: analysis.train.trainer.TrainConfig)."""
    return dict(hidden_size=cfg.hidden_size, num_hidden_layers=cfg.layers, num_heads=cfg.heads,
                vocab_size=vocab_size, tie_word_embeddings=True, max_position_embeddings=cfg.seq_len,
                bos_token_id=0, eos_token_id=0)


def install_fla_routing() -> None:
    """fla's linear ops (analysis.runtime.backend) plus its softmax-attention entry points, routed by device."""
    global _routed
    from analysis.runtime import backend
    backend.install()
    if _routed:
        return
    import fla.layers.attn as fla_attn
    import fla.modules.rotary.ops as rotary_ops

    real_flash = fla_attn.flash_attn_func

    def flash_attn_func(q, k, v, causal=True, window_size=(-1, -1), **kwargs):
        if q.is_cuda and real_flash is not None:
            return real_flash(q, k, v, causal=causal, window_size=window_size, **kwargs)
        return sdpa_attention(q, k, v, causal=causal, window_left=window_size[0])

    real_rotary = rotary_ops.rotary_embedding

    def rotary_embedding(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                         chunk_indices=None):
        if x.is_cuda:
            return real_rotary(x, cos, sin, interleaved, inplace, seqlen_offsets, cu_seqlens, chunk_indices)
        return rotary_torch(x, cos, sin, interleaved, seqlen_offsets, cu_seqlens)

    fla_attn.flash_attn_func = flash_attn_func
    rotary_ops.rotary_embedding = rotary_embedding
    _routed = True


def sdpa_attention(q, k, v, causal: bool = True, window_left: int = -1) -> torch.Tensor:
    """flash_attn_func's semantics in torch: [B,T,H,D] q, [B,S,Hkv,D] k/v (grouped heads), causal aligned to the
    bottom right (decoding), a sliding window of `window_left` earlier tokens when ≥ 0."""
    B, T, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    k, v = (x.repeat_interleave(H // Hkv, dim=2) for x in (k, v))
    i = torch.arange(T, device=q.device)[:, None] + (S - T)
    j = torch.arange(S, device=q.device)[None, :]
    allowed = (j <= i) if causal else torch.ones(T, S, dtype=torch.bool, device=q.device)
    if window_left is not None and window_left >= 0:
        allowed = allowed & (j >= i - window_left)
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                                         v.transpose(1, 2).float(), attn_mask=allowed)
    return o.transpose(1, 2).to(q.dtype)


def rotary_torch(x, cos, sin, interleaved=False, seqlen_offsets=0, cu_seqlens=None) -> torch.Tensor:
    """fla's rotary embedding (rotary_embedding_ref) at each token's position: x [B,T,H,D], cos/sin [TR, R/2]."""
    from fla.modules.rotary.ops import rotary_embedding_ref
    if cu_seqlens is not None:
        bounds = cu_seqlens.tolist()
        parts = [rotary_torch(x[:, s:e], cos, sin, interleaved,
                              seqlen_offsets if isinstance(seqlen_offsets, int) else int(seqlen_offsets[n]))
                 for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:]))]
        return torch.cat(parts, dim=1)
    T = x.shape[1]
    if isinstance(seqlen_offsets, int):
        c, s = cos[seqlen_offsets:seqlen_offsets + T], sin[seqlen_offsets:seqlen_offsets + T]   # [T, R/2]
    else:
        pos = seqlen_offsets.to(cos.device)[:, None] + torch.arange(T, device=cos.device)
        c, s = cos[pos], sin[pos]                                                               # [B, T, R/2]
    return rotary_embedding_ref(x, c, s, interleaved).to(x.dtype)
