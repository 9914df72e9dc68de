"""`pruned_gla`: fla's GLA model with its own key dim in every GLA layer (GLAConfig holds one expand_k).

The model is built as fla builds it, then each GatedLinearAttention layer's key-channel parameters are re-created
at that layer's key dim: q/k projections, q/k short convolutions (as for fla DeltaNet, `fla_shared.pruned.set_key_dim`)
and the decay rows (the last linear of the low-rank gate projection `gk_proj`, one row per head and key channel).
Softmax-attention blocks of hybrids (fla's `attn` setting) are untouched.

Readout scale (pure channel removal): GLA reads out at dk'^-1/2 and its output reaches only a per-head RMSNorm
(`g_norm_swish_gate`, gated after the normalisation, or `g_norm`), so that norm's eps·dk/dk' gives exactly the
original dk^-1/2 output, RMSNorm(c·o, c²·eps) = RMSNorm(o, eps) with c² = dk/dk' (fla_shared.pruned's rule).
"""
from __future__ import annotations

import torch.nn as nn
from fla.layers.gla import GatedLinearAttention
from fla.models import GLAConfig, GLAForCausalLM
from transformers import AutoConfig, AutoModelForCausalLM

from analysis.archs.base import pruned_type
from analysis.archs.fla_shared.pruned import apply_key_dims
from analysis.archs.fla_shared.pruned import set_key_dim as fla_set_key_dim


def keep_readout_scale(attn: GatedLinearAttention, readout_key_dim: int) -> None:
    """The per-head RMSNorm GLA's output goes through first (gated or not) reads as at readout_key_dim^-1/2."""
    norm = attn.g_norm_swish_gate if attn.fuse_norm_and_gate else attn.g_norm
    norm.eps = norm.eps * readout_key_dim / attn.head_k_dim


def set_key_dim(attn: GatedLinearAttention, head_k_dim: int) -> None:
    """Re-create one GLA layer's key-channel parameters (q/k, their convs, decay rows) for `head_k_dim`."""
    fla_set_key_dim(attn, head_k_dim)
    old = attn.gk_proj[1]
    attn.gk_proj[1] = nn.Linear(old.in_features, attn.key_dim, bias=old.bias is not None,
                                device=old.weight.device, dtype=old.weight.dtype)
    attn.key_dim_per_group = attn.key_dim


class PrunedGLAConfig(GLAConfig):
    model_type = pruned_type("gla")

    def __init__(self, head_k_dims: list[int] | None = None, readout_key_dims: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.head_k_dims = head_k_dims            # one per GLA layer (softmax blocks have none)
        self.readout_key_dims = readout_key_dims


class PrunedGLAForCausalLM(GLAForCausalLM):
    config_class = PrunedGLAConfig

    def __init__(self, config):
        super().__init__(config)
        apply_key_dims(self, set_key_dim, keep_readout_scale)


AutoConfig.register(PrunedGLAConfig.model_type, PrunedGLAConfig, exist_ok=True)
AutoModelForCausalLM.register(PrunedGLAConfig, PrunedGLAForCausalLM, exist_ok=True)
