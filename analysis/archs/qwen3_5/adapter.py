"""transformers' Qwen3.5 / Qwen3.5-MoE / Qwen3-Next / OLMo-hybrid text models: Gated DeltaNet + softmax attention.

Each decoder block holds either `linear_attn` (a Gated DeltaNet layer, `layer_types[i] == "linear_attention"`)
or `self_attn` (gated softmax attention with a KV cache). A GDN layer has Hk key heads and Hv = G·Hk value
heads: key head h serves value heads h·G … h·G+G−1 (transformers repeats q/k with `repeat_interleave`, inside
the kernel). Its q/k channels sit in one fused projection and one depthwise conv over q|k|v:
- Qwen3.5 (and -MoE): `in_proj_qkv` rows are [q (Hk·dk) | k (Hk·dk) | v (Hv·dv)], head-major inside each;
- Qwen3-Next: `in_proj_qkvz` interleaves per key head [q_h (dk) | k_h (dk) | v (G·dv) | z (G·dv)];
- OLMo-hybrid: separate `q_proj` / `k_proj` (β may be ×2: allow_neg_eigval, applied before the kernel);
- all: `conv1d` channels are [q | k | v] in that order, head-major, no bias.
The log-decay g = −exp(A_log)·softplus(a + dt_bias) is one per (token, value head), β = sigmoid(b).

Pure channel removal keeps the original readout scale dk^-1/2 while transformers reads out at dk'^-1/2 (its
kernels take no scale), i.e. c = sqrt(dk/dk') times the original o, and o reaches only the gated RMSNorm `norm`
(`norm`, OLMo-hybrid `o_norm`; per value head, over dv, eps `variance_epsilon`): RMSNorm(c·o, c²·eps) = RMSNorm(o, eps), so the pruned layer
sets `norm.variance_epsilon = eps·dk/dk'` — exact, as `analysis.archs.fla_shared.pruned` explains for fla.
The family's own config holds one `rms_norm_eps` for every norm and one `linear_key_head_dim`, so only a uniform dk' read
out at dk'^-1/2 (readout_key_dims None) is saved as the family's own type; every other result is the project's
registered `pruned_<type>` with per-linear-layer `linear_key_head_dims` and `readout_key_dims`.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from analysis.archs.base import (PRUNED_PREFIX, Adapter, Block, ChannelRows, FamilySpec, HeadRows, LayerSizes,
                                 head_blocks, is_pruned_type)
from analysis.archs.heads import apply_head_counts, head_config_fields
from analysis.archs.pruned_types import make_pruned_type
from analysis.archs.qwen3_5.routing import ENTRY_POINTS
from analysis.errors import AnalysisError

# the text models (a multimodal wrapper is pruned through its text model), each with a pruned_<type>
TEXT_TYPES = ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "olmo_hybrid")


def _decoder_layers(model) -> nn.ModuleList:
    inner = model.model
    inner = getattr(inner, "language_model", inner)  # qwen3_5 / qwen3_5_moe multimodal wrappers
    return inner.layers


def _is_interleaved(layer: nn.Module) -> bool:
    return hasattr(layer, "in_proj_qkvz")  # Qwen3-Next


def _output_norm(layer: nn.Module) -> nn.Module:
    return layer.norm if hasattr(layer, "norm") else layer.o_norm  # OLMo-hybrid names it o_norm


def sum_over_value_heads(x: torch.Tensor, key_heads: int, dim: int) -> torch.Tensor:
    """Per-value-head scores → per-key-head scores: key head h sums the value heads it serves (h·G … h·G+G−1)."""
    shape = list(x.shape)
    groups = shape[dim] // key_heads
    shape[dim:dim + 1] = [key_heads, groups]
    return x.reshape(shape).sum(dim + 1)


def set_key_dim(layer: nn.Module, head_k_dim: int) -> None:
    """Re-create one GDN layer's fused q|k(|v|z) projection and q|k|v conv for `head_k_dim` channels per key head."""
    key_dim = layer.num_k_heads * head_k_dim
    if hasattr(layer, "q_proj"):  # OLMo-hybrid: separate projections
        rows = {"q_proj": key_dim, "k_proj": key_dim}
    elif _is_interleaved(layer):
        rows = {"in_proj_qkvz": 2 * key_dim + 2 * layer.value_dim}
    else:
        rows = {"in_proj_qkv": 2 * key_dim + layer.value_dim}
    for name, out in rows.items():
        old = getattr(layer, name)
        setattr(layer, name, nn.Linear(old.in_features, out, bias=old.bias is not None,
                                       device=old.weight.device, dtype=old.weight.dtype))
    conv = layer.conv1d
    conv_dim = 2 * key_dim + layer.value_dim
    layer.conv1d = nn.Conv1d(conv_dim, conv_dim, kernel_size=conv.kernel_size[0], groups=conv_dim,
                             padding=conv.padding[0], bias=conv.bias is not None,
                             device=conv.weight.device, dtype=conv.weight.dtype)
    layer.head_k_dim, layer.key_dim, layer.conv_dim = head_k_dim, key_dim, conv_dim


def keep_readout_scale(layer: nn.Module, readout_key_dim: int) -> None:
    """Make the layer's normalised output that of readout scale readout_key_dim^-1/2 (see the module doc)."""
    norm = _output_norm(layer)
    norm.variance_epsilon = norm.variance_epsilon * readout_key_dim / layer.head_k_dim


def _apply_key_dims(model) -> None:
    apply_head_counts(model)   # heads first: set_key_dim sizes the fused q|k(|v|z) rows for the kept heads
    config = model.config
    linear = [b.linear_attn for b in _decoder_layers(model) if hasattr(b, "linear_attn")]
    dims, readout = config.linear_key_head_dims, getattr(config, "readout_key_dims", None)
    for name, values in (("linear_key_head_dims", dims), ("readout_key_dims", readout)):
        if values is not None and len(values) != len(linear):
            raise ValueError(f"{name} has {len(values)} entries for {len(linear)} linear-attention layers")
    for i, layer in enumerate(linear):
        if dims is not None and int(dims[i]) != layer.head_k_dim:
            set_key_dim(layer, int(dims[i]))
        if readout is not None:
            keep_readout_scale(layer, int(readout[i]))


PRUNED_TYPES: dict[str, tuple[type, type]] = {}


def register_pruned_types() -> None:
    """pruned_<type>: the family's own classes plus per-linear-layer key dims and readout key dims (idempotent)."""
    for own in TEXT_TYPES:
        if own in PRUNED_TYPES:
            continue
        try:
            PRUNED_TYPES[own] = make_pruned_type(own, _apply_key_dims)
        except (KeyError, ImportError, AttributeError):  # an older transformers without this family
            continue


SPEC = FamilySpec(
    family="qwen3_5", label="Qwen3.5 / Qwen3-Next / OLMo-hybrid (Gated DeltaNet + attention)",
    own_types=("qwen3_5_text", "qwen3_5", "qwen3_5_moe_text", "qwen3_5_moe", "qwen3_next", "olmo_hybrid"),
    prunable_types=TEXT_TYPES, kernel="gated_delta_rule",
    entry_points=ENTRY_POINTS,   # what qwen3_5/routing.py routes
    sizes=LayerSizes(key_heads="num_k_heads", value_heads="num_v_heads", key_dim="head_k_dim", value_dim="head_v_dim"),
    # Qwen3.5 fuses q|k|v, Qwen3-Next q|k|v|z; OLMo-hybrid keeps separate q/k/v projections
    lora_projections=("in_proj_qkv", "in_proj_qkvz", "q_proj", "k_proj", "v_proj"),
    key_dims_config_key="linear_key_head_dims")


class Qwen35Adapter(Adapter):
    def config_refusal(self, config: dict, where: str) -> str | None:
        """Value heads that the key heads do not divide: each key head serves linear_num_value_heads /
        linear_num_key_heads value heads (the kernel's repeat), so no forward pass, transformers' own included,
        can run it (docs/config-flags.md, "Config flags of the transformers families")."""
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        keys, values = text.get("linear_num_key_heads"), text.get("linear_num_value_heads")
        if isinstance(keys, int) and isinstance(values, int) and keys > 0 and values % keys:
            return (f"{where} sets linear_num_value_heads to {values}, which linear_num_key_heads ({keys}) does not "
                    "divide, and each key head serves the same number of value heads, so fix one of them.")
        return None

    # --- structure -------------------------------------------------------------------------------
    def blocks(self, model) -> list[Block]:
        out = []
        for i, block in enumerate(_decoder_layers(model)):
            if hasattr(block, "linear_attn"):
                out.append(Block(i, "linear", block.linear_attn))
            elif hasattr(block, "self_attn"):
                out.append(Block(i, "softmax", block.self_attn))
            else:
                raise AnalysisError(f"Block {i} of this {model.config.model_type} model has neither a linear nor a "
                                    "softmax attention module; this transformers version is not supported.")
        return out

    def decoder_layers(self, model):
        return _decoder_layers(model)

    def channel_rows(self, layer) -> list[ChannelRows]:
        keys = layer.num_k_heads * layer.head_k_dim
        if hasattr(layer, "q_proj"):
            projection = [ChannelRows("q_proj.weight", "q"), ChannelRows("k_proj.weight", "k")]
        elif _is_interleaved(layer):
            per_head = layer.in_proj_qkvz.weight.shape[0] // layer.num_k_heads
            projection = [ChannelRows("in_proj_qkvz.weight", "q", 0, head_stride=per_head),
                          ChannelRows("in_proj_qkvz.weight", "k", layer.head_k_dim, head_stride=per_head)]
        else:
            projection = [ChannelRows("in_proj_qkv.weight", "q", 0), ChannelRows("in_proj_qkv.weight", "k", keys)]
        conv = [ChannelRows("conv1d.weight", "q", 0, conv=True), ChannelRows("conv1d.weight", "k", keys, conv=True)]
        if layer.conv1d.bias is not None:
            conv += [ChannelRows("conv1d.bias", "q", 0, conv=True), ChannelRows("conv1d.bias", "k", keys, conv=True)]
        return projection + conv

    def head_rows(self, layer) -> list[HeadRows]:
        """Per key head: its q and k rows (fused or separate) and conv channels. Per value head: its v rows and
        conv channels, output-gate rows (z, OLMo-hybrid's g_proj), β and decay rows (b, a), A_log, dt_bias and
        the output projection's input columns. Qwen3-Next interleaves q|k|v|z per key head in in_proj_qkvz and
        b|a per key head in in_proj_ba: value head j sits at slot j mod G of key head j // G there."""
        hk, hv, dk, dv = layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
        group, keys = hv // hk, hk * dk
        conv = [head_blocks("conv1d.weight", "key", hk, dk), head_blocks("conv1d.weight", "key", hk, dk, keys),
                head_blocks("conv1d.weight", "value", hv, dv, 2 * keys)]
        if layer.conv1d.bias is not None:
            conv += [HeadRows("conv1d.bias", r.role, r.starts, r.width) for r in conv]
        scalars = ["A_log", "dt_bias"]
        if hasattr(layer, "q_proj"):    # OLMo-hybrid
            rows = [head_blocks("q_proj.weight", "key", hk, dk), head_blocks("k_proj.weight", "key", hk, dk),
                    head_blocks("v_proj.weight", "value", hv, dv), head_blocks("g_proj.weight", "value", hv, dv)]
            scalars += ["a_proj.weight", "b_proj.weight"]
        elif _is_interleaved(layer):    # Qwen3-Next
            block = 2 * dk + 2 * group * dv

            def slot(offset: int, width: int) -> tuple:
                return tuple(h // group * block + offset + h % group * width for h in range(hv))
            rows = [HeadRows("in_proj_qkvz.weight", "key", tuple(h * block for h in range(hk)), dk),
                    HeadRows("in_proj_qkvz.weight", "key", tuple(h * block + dk for h in range(hk)), dk),
                    HeadRows("in_proj_qkvz.weight", "value", slot(2 * dk, dv), dv),
                    HeadRows("in_proj_qkvz.weight", "value", slot(2 * dk + group * dv, dv), dv),
                    HeadRows("in_proj_ba.weight", "value", tuple(h // group * 2 * group + h % group
                                                                 for h in range(hv)), 1),
                    HeadRows("in_proj_ba.weight", "value", tuple(h // group * 2 * group + group + h % group
                                                                 for h in range(hv)), 1)]
        else:                           # Qwen3.5 (and -MoE)
            rows = [head_blocks("in_proj_qkv.weight", "key", hk, dk), head_blocks("in_proj_qkv.weight", "key", hk, dk, keys),
                    head_blocks("in_proj_qkv.weight", "value", hv, dv, 2 * keys),
                    head_blocks("in_proj_z.weight", "value", hv, dv)]
            scalars += ["in_proj_a.weight", "in_proj_b.weight"]
        out = "o_proj.weight" if hasattr(layer, "o_proj") else "out_proj.weight"
        return (rows + conv + [head_blocks(name, "value", hv, 1) for name in scalars]
                + [head_blocks(out, "value", hv, dv, dim=1)])

    def set_head_counts(self, layer, key_heads: int, value_heads: int, original) -> None:
        layer.num_k_heads, layer.num_v_heads = key_heads, value_heads
        layer.key_dim, layer.value_dim = key_heads * layer.head_k_dim, value_heads * layer.head_v_dim
        layer.conv_dim = 2 * layer.key_dim + layer.value_dim

    def head_output(self, layer):
        return layer.o_proj if hasattr(layer, "o_proj") else layer.out_proj

    def softmax_cache_bytes(self, module, tokens, dtype_bytes):
        return 2 * module.config.num_key_value_heads * module.head_dim * tokens * dtype_bytes

    # --- pruning ---------------------------------------------------------------------------------
    def pruned_model(self, model, key_dims, readout_key_dims, head_counts=None):
        layers = self.linear_layers(model)
        if len(key_dims) != len(layers):
            raise AnalysisError(f"Got {len(key_dims)} key dims for {len(layers)} linear-attention layers; give one "
                                "per linear layer.")
        register_pruned_types()
        config = copy.deepcopy(model.config)
        base = config.model_type.removeprefix(PRUNED_PREFIX)
        if base not in PRUNED_TYPES:
            raise AnalysisError(f"Pruning {config.model_type!r} models needs their text model class "
                                f"({', '.join(PRUNED_TYPES)}); load the checkpoint as a causal language model.")
        dims = [int(d) for d in key_dims]
        readout = None if readout_key_dims is None else [int(d) for d in readout_key_dims]
        heads = head_config_fields(model, self, head_counts)
        param = next(model.parameters())
        if len(set(dims)) == 1 and readout is None and not heads and not is_pruned_type(config.model_type):
            config.linear_key_head_dim = dims[0]  # the family's own type, loadable without this project
            cls = type(model)
        else:
            cfg_cls, cls = PRUNED_TYPES[base]
            config = cfg_cls(**{k: v for k, v in config.to_dict().items() if k not in ("model_type",)})
            config.linear_key_head_dims, config.readout_key_dims = dims, readout
            for key, value in heads.items():
                setattr(config, key, value)
            config.architectures = [cls.__name__]
        with torch.device(param.device):
            pruned = cls(config)
        return pruned.to(param.dtype).eval()

    # --- training --------------------------------------------------------------------------------
    def training_config(self, cfg, vocab_size: int):
        """transformers' Qwen3.5 text model: Gated DeltaNet blocks with every `full_attention_interval`-th block
        softmax attention; `heads` value heads and `key_heads` key heads of `head_dim` channels each; the softmax
        blocks use `key_heads` query heads sharing max(1, key_heads // 2) key/value heads of the same width."""
        from transformers.models.qwen3_5 import Qwen3_5TextConfig
        key_heads = cfg.key_heads or max(1, cfg.heads // 2)
        if cfg.heads % key_heads:
            raise AnalysisError(f"--heads ({cfg.heads}) must be a multiple of --key-heads ({key_heads}): each key "
                                "head serves the same number of value heads.")
        every = cfg.full_attention_interval
        return Qwen3_5TextConfig(
            vocab_size=vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.layers,
            intermediate_size=cfg.intermediate_size or 2 * cfg.hidden_size,
            num_attention_heads=key_heads, num_key_value_heads=max(1, key_heads // 2), head_dim=cfg.head_dim,
            linear_num_key_heads=key_heads, linear_num_value_heads=cfg.heads, linear_key_head_dim=cfg.head_dim,
            linear_value_head_dim=cfg.head_dim, max_position_embeddings=cfg.seq_len, tie_word_embeddings=True,
            layer_types=["full_attention" if (i + 1) % every == 0 else "linear_attention"
                         for i in range(cfg.layers)],
            bos_token_id=0, eos_token_id=0)

    # --- devices ---------------------------------------------------------------------------------
    def install_routing(self) -> None:
        """Route the gated delta rule's entry points by device and register pruned_<type>."""
        from analysis.archs.qwen3_5 import routing
        routing.install(self.kernel_spec.recurrence)
        register_pruned_types()


ADAPTER = Qwen35Adapter(SPEC)
