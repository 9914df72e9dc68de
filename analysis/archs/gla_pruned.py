"""`pruned_gla`: fla's GLA model with its own key dim in every GLA layer (GLAConfig holds one expand_k).

The model is built as fla builds it, then each GatedLinearAttention layer's key-channel parameters are re-created
at that layer's key dim: q/k projections, q/k short convolutions (as for fla DeltaNet, `fla_pruned.set_key_dim`)
and the decay rows (the last linear of the low-rank gate projection `gk_proj`, one row per head and key channel).
Softmax-attention blocks of hybrids (fla's `attn` setting) are untouched.

Readout scale (pure channel removal): GLA reads out at dk'^-1/2 and its output reaches only a per-head RMSNorm
(`g_norm_swish_gate`, gated after the normalisation, or `g_norm`), so that norm's eps·dk/dk' gives exactly the
original dk^-1/2 output, RMSNorm(c·o, c²·eps) = RMSNorm(o, eps) with c² = dk/dk' (fla_pruned's rule).
"""
from __future__ import annotations

import torch.nn as nn
from fla.layers.gla import GatedLinearAttention
from fla.models import GLAConfig, GLAForCausalLM
from transformers import AutoConfig, AutoModelForCausalLM

from analysis.archs.fla_pruned import linear_blocks
from analysis.archs.fla_pruned import set_key_dim as fla_set_key_dim


def output_norm(attn: GatedLinearAttention) -> nn.Module:
    """The per-head RMSNorm GLA's recurrence output goes through first (gated or not)."""
    return attn.g_norm_swish_gate if attn.fuse_norm_and_gate else attn.g_norm


def set_key_dim(attn: GatedLinearAttention, head_k_dim: int) -> None:
    """Re-create one GLA layer's key-channel parameters (q/k, their convs, decay rows) for `head_k_dim`."""
    fla_set_key_dim(attn, head_k_dim)
    old = attn.gk_proj[1]
    attn.gk_proj[1] = nn.Linear(old.in_features, attn.key_dim, bias=old.bias is not None,
                                device=old.weight.device, dtype=old.weight.dtype)
    attn.key_dim_per_group = attn.key_dim


class PrunedGLAConfig(GLAConfig):
    model_type = "pruned_gla"

    def __init__(self, head_k_dims: list[int] | None = None, readout_key_dims: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.head_k_dims = head_k_dims            # one per GLA layer (softmax blocks have none)
        self.readout_key_dims = readout_key_dims


class PrunedGLAForCausalLM(GLAForCausalLM):
    config_class = PrunedGLAConfig

    def __init__(self, config):
        super().__init__(config)
        layers = [block.attn for block in linear_blocks(self)]
        dims, readout = config.head_k_dims, config.readout_key_dims
        for name, values in (("head_k_dims", dims), ("readout_key_dims", readout)):
            if values is not None and len(values) != len(layers):
                raise ValueError(f"{name} has {len(values)} entries for {len(layers)} GLA layers")
        for i, attn in enumerate(layers):
            if dims is not None and int(dims[i]) != attn.head_k_dim:
                set_key_dim(attn, int(dims[i]))
            if readout is not None:
                output_norm(attn).eps *= int(readout[i]) / attn.head_k_dim


AutoConfig.register(PrunedGLAConfig.model_type, PrunedGLAConfig, exist_ok=True)
AutoModelForCausalLM.register(PrunedGLAConfig, PrunedGLAForCausalLM, exist_ok=True)
