"""`pruned_kda`: fla's KDA model with its own key dim in every KDA layer (KDAConfig holds one head_dim).

The model is built as fla builds it, then each Kimi Delta Attention layer's key-channel parameters are
re-created at that layer's key dim: q/k projections, q/k short convolutions, and the per-key-channel decay
rows (the last linear of the gate projection f_proj and dt_bias, one row per value head and key channel).
The layers stay fla's own class, so fla's Triton kernels run them on GPU and `from_pretrained` round-trips
them after `import analysis`. Softmax-attention blocks of hybrids (fla's `attn` setting) are untouched.

Readout scale (pure channel removal): KDA reads out at dk'^-1/2 and its output reaches only the per-head
FusedRMSNormGated o_norm, y = RMSNorm(o)·w·sigmoid(gate), whose gate multiplies after the normalisation; so
o_norm.eps·dk/dk' gives exactly the original dk^-1/2 output, RMSNorm(c·o, c²·eps) = RMSNorm(o, eps) with
c² = dk/dk' (the rule analysis/archs/fla_shared/pruned.py states for fla DeltaNet). `readout_key_dims` holds, per KDA
layer, the key dim whose ^-1/2 the readout keeps; KDAConfig's one norm_eps also sets the block norms, so
only this type can say it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from fla.layers.kda import KimiDeltaAttention
from fla.models import KDAConfig, KDAForCausalLM
from transformers import AutoConfig, AutoModelForCausalLM

from analysis.archs.base import pruned_type
from analysis.archs.fla_shared.pruned import keep_readout_scale
from analysis.archs.fla_shared.pruned import set_key_dim as fla_set_key_dim
from analysis.archs.heads import apply_head_counts


def kda_layers(model) -> list[KimiDeltaAttention]:
    """The Kimi Delta Attention layers of a KDA model, in block order (softmax blocks skipped)."""
    return [b.attn for b in model.model.layers if isinstance(b.attn, KimiDeltaAttention)]


def set_key_dim(attn: KimiDeltaAttention, head_k_dim: int) -> None:
    """Re-create one KDA layer's key-channel parameters (q/k, their convs, decay rows) for `head_k_dim`."""
    fla_set_key_dim(attn, head_k_dim)                     # q/k projections and short convolutions, as for fla DeltaNet
    gate_dim = attn.num_v_heads * head_k_dim
    old = attn.f_proj[1]
    attn.f_proj[1] = nn.Linear(old.in_features, gate_dim, bias=old.bias is not None,
                               device=old.weight.device, dtype=old.weight.dtype)
    attn.dt_bias = nn.Parameter(torch.empty(gate_dim, device=attn.dt_bias.device, dtype=attn.dt_bias.dtype))
    attn.dt_bias._no_weight_decay = True
    attn.gate_dim = gate_dim


class PrunedKDAConfig(KDAConfig):
    model_type = pruned_type("kda")

    def __init__(self, head_k_dims: list[int] | None = None, readout_key_dims: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.head_k_dims = head_k_dims            # one per KDA layer (softmax blocks have none)
        self.readout_key_dims = readout_key_dims


class PrunedKDAForCausalLM(KDAForCausalLM):
    config_class = PrunedKDAConfig

    def __init__(self, config):
        super().__init__(config)
        apply_head_counts(self)   # heads first: set_key_dim sizes q/k and the decay rows for the kept heads
        layers = kda_layers(self)
        dims, readout = config.head_k_dims, config.readout_key_dims
        for name, values in (("head_k_dims", dims), ("readout_key_dims", readout)):
            if values is not None and len(values) != len(layers):
                raise ValueError(f"{name} has {len(values)} entries for {len(layers)} KDA layers")
        for i, attn in enumerate(layers):
            if dims is not None and int(dims[i]) != attn.head_k_dim:
                set_key_dim(attn, int(dims[i]))
            if readout is not None:
                keep_readout_scale(attn, int(readout[i]))


AutoConfig.register(PrunedKDAConfig.model_type, PrunedKDAConfig, exist_ok=True)
AutoModelForCausalLM.register(PrunedKDAConfig, PrunedKDAForCausalLM, exist_ok=True)
