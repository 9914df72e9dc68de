"""fla model types whose key dimension may differ per layer (fla's configs hold one key dim for all layers).

`pruned_delta_net` / `pruned_gated_deltanet` are fla's DeltaNet / Gated DeltaNet with a `head_k_dims`
list in the config (one per linear-attention layer; a hybrid's softmax blocks have none): the model is built as fla builds it, then each layer's q/k projections and q/k
short convolutions are re-created at that layer's key dim. The layers stay fla's own classes, so
fla's Triton kernels run them on GPU and `from_pretrained` round-trips them after `import analysis`.

Pruning is pure channel removal: the pruned model equals the original with the dropped q/k channels
zeroed, at the ORIGINAL readout scale dk^-1/2. fla's layers read out at dk'^-1/2 (no config field sets
the scale), i.e. c = sqrt(dk/dk') times the original o, and o reaches only the per-head output norm.
`readout_key_dims` (the key dim whose ^-1/2 each layer's readout should keep) sets that norm's eps to
eps·dk/dk', which is exact: RMSNorm(c·o, c²·eps) = RMSNorm(o, eps), gated or not, on CPU (analysis.runtime.cpu_ops)
and GPU (fla's kernels read `o_norm.eps` at every call). A plain fla config cannot say this: its one
`norm_eps` also sets the block norms. `readout_key_dims` absent (models saved before it existed, or
`--rescale default`) keeps fla's dk'^-1/2, the reference code's behaviour.
"""
from __future__ import annotations

import torch.nn as nn
from fla.models import (DeltaNetConfig, DeltaNetForCausalLM, GatedDeltaNetConfig,
                        GatedDeltaNetForCausalLM)
from fla.modules import ShortConvolution
from transformers import AutoConfig, AutoModelForCausalLM

from analysis.archs.base import pruned_type
from analysis.archs.fla_shared.adapter import install_fla_routing, softmax_layer_indices
from analysis.archs.heads import apply_head_counts


def set_key_dim(attn: nn.Module, head_k_dim: int) -> None:
    """Re-create one attention layer's q/k projections and convolutions for `head_k_dim` channels."""
    key_dim = attn.num_heads * head_k_dim
    for name in ("q_proj", "k_proj"):
        old = getattr(attn, name)
        setattr(attn, name, nn.Linear(old.in_features, key_dim, bias=old.bias is not None,
                                      device=old.weight.device, dtype=old.weight.dtype))
    for name in ("q_conv1d", "k_conv1d"):
        old = getattr(attn, name, None)
        if old is not None:
            setattr(attn, name, ShortConvolution(key_dim, old.kernel_size[0], bias=old.bias is not None,
                                                 activation=old.activation, backend=old.backend,
                                                 device=old.weight.device, dtype=old.weight.dtype))
    attn.head_k_dim, attn.key_dim = head_k_dim, key_dim
    if hasattr(attn, "head_dim"):  # Gated DeltaNet names its key dim head_dim
        attn.head_dim = head_k_dim


def keep_readout_scale(attn: nn.Module, readout_key_dim: int) -> None:
    """Make the layer's normalised output that of readout scale readout_key_dim^-1/2 (see the module doc)."""
    attn.o_norm.eps = attn.o_norm.eps * readout_key_dim / attn.head_k_dim


def linear_blocks(model) -> list:
    """The blocks holding the linear layers (a hybrid's softmax-attention blocks left out): one key dim each."""
    softmax = softmax_layer_indices(model.config)
    return [block for i, block in enumerate(model.model.layers) if i not in softmax]


def apply_key_dims(model, set_dim=set_key_dim, keep_readout=keep_readout_scale) -> None:
    """Give each linear layer of a freshly built fla model its kept head counts (analysis.archs.heads), then its
    config's `head_k_dims` entry (`set_dim(attn, dk)`) and its `readout_key_dims` readout scale
    (`keep_readout(attn, dk)`); GLA passes its own two (analysis.archs.gla.pruned)."""
    apply_head_counts(model)   # heads first: set_dim sizes q/k for the kept key heads
    dims = model.config.head_k_dims
    if dims is None:
        return
    layers = linear_blocks(model)
    readout = getattr(model.config, "readout_key_dims", None)
    for name, values in (("head_k_dims", dims), ("readout_key_dims", readout)):
        if values is not None and len(values) != len(layers):
            raise ValueError(f"{name} has {len(values)} entries for {len(layers)} linear-attention layers")
    for i, (block, dk) in enumerate(zip(layers, dims)):
        if dk != block.attn.head_k_dim:
            set_dim(block.attn, int(dk))
        if readout is not None:
            keep_readout(block.attn, int(readout[i]))


class PrunedDeltaNetConfig(DeltaNetConfig):
    model_type = pruned_type("delta_net")

    def __init__(self, head_k_dims: list[int] | None = None, readout_key_dims: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.head_k_dims = head_k_dims
        self.readout_key_dims = readout_key_dims


class PrunedGatedDeltaNetConfig(GatedDeltaNetConfig):
    model_type = pruned_type("gated_deltanet")

    def __init__(self, head_k_dims: list[int] | None = None, readout_key_dims: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.head_k_dims = head_k_dims
        self.readout_key_dims = readout_key_dims


class PrunedDeltaNetForCausalLM(DeltaNetForCausalLM):
    config_class = PrunedDeltaNetConfig

    def __init__(self, config):
        super().__init__(config)
        apply_key_dims(self)


class PrunedGatedDeltaNetForCausalLM(GatedDeltaNetForCausalLM):
    config_class = PrunedGatedDeltaNetConfig

    def __init__(self, config):
        super().__init__(config)
        apply_key_dims(self)


for _cfg, _model in ((PrunedDeltaNetConfig, PrunedDeltaNetForCausalLM),
                     (PrunedGatedDeltaNetConfig, PrunedGatedDeltaNetForCausalLM)):
    AutoConfig.register(_cfg.model_type, _cfg, exist_ok=True)
    AutoModelForCausalLM.register(_cfg, _model, exist_ok=True)

install_fla_routing()  # fla hybrids (softmax `attn` layers) need it to be built at all, on any device
