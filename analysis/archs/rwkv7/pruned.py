"""`pruned_rwkv7`: fla's RWKV-7 model with its own key dim in every RWKV-7 layer.

RWKV-7's config cannot say a smaller key dim at all: fla's layer sets its key dim to hidden_size and its heads to
hidden_size / head_dim, so every prune saves this type, with `head_k_dims` (one per RWKV-7 layer) beside the
family's own fields (`head_dim` stays the original, so the heads and the value dims do not move).

The model is built as fla builds it, then each RWKV7Attention's key-channel parameters are re-created at that
layer's key dim: r_proj and k_proj (rows), the last linear of the decay LoRA (`w_lora`) and of the in-context
learning-rate LoRA (`a_lora`) (rows and bias), and the per-channel `k_k`, `k_a` and `r_k` ([heads, dk]).
Everything on the value side (v_proj, v_lora, g_lora, the GroupNorm over each head's values, whose eps fla derives
from head_dim and which keeps the original's), the token-shift mixes x_* and o_proj stay as they are.
There is no readout scale (o_t = S_tᵀ r_t), so pure channel removal needs no correction.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from fla.layers.rwkv7 import RWKV7Attention
from fla.models import RWKV7Config, RWKV7ForCausalLM
from transformers import AutoConfig, AutoModelForCausalLM

from analysis.archs.base import pruned_type


def rwkv7_layers(model) -> list[RWKV7Attention]:
    """The RWKV-7 layers of a model, in block order (a hybrid's softmax blocks skipped)."""
    return [b.attn for b in model.model.layers if isinstance(b.attn, RWKV7Attention)]


def _linear(old: nn.Linear, rows: int) -> nn.Linear:
    new = nn.Linear(old.in_features, rows, bias=old.bias is not None, device=old.weight.device, dtype=old.weight.dtype)
    new._in_rwkv_module = True   # fla's model init leaves RWKV modules to the layer's own init
    return new


def set_key_dim(attn: RWKV7Attention, head_k_dim: int) -> None:
    """Re-create one RWKV-7 layer's key-channel parameters for `head_k_dim` channels per head."""
    key_dim = attn.num_heads * head_k_dim
    attn.r_proj, attn.k_proj = _linear(attn.r_proj, key_dim), _linear(attn.k_proj, key_dim)
    for lora in (attn.w_lora, attn.a_lora):
        lora.lora[2] = _linear(lora.lora[2], key_dim)
        lora.output_dim = key_dim
    like = dict(device=attn.k_k.device, dtype=attn.k_k.dtype)
    attn.k_k = nn.Parameter(torch.zeros(key_dim, **like))
    attn.k_a = nn.Parameter(torch.zeros(key_dim, **like))
    attn.r_k = nn.Parameter(torch.zeros(attn.num_heads, head_k_dim, **like))
    attn.head_dim, attn.key_dim = head_k_dim, key_dim


class PrunedRWKV7Config(RWKV7Config):
    model_type = pruned_type("rwkv7")

    def __init__(self, head_k_dims: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.head_k_dims = head_k_dims            # one per RWKV-7 layer (softmax blocks have none)


class PrunedRWKV7ForCausalLM(RWKV7ForCausalLM):
    config_class = PrunedRWKV7Config

    def __init__(self, config):
        super().__init__(config)
        layers, dims = rwkv7_layers(self), config.head_k_dims
        if dims is not None and len(dims) != len(layers):
            raise ValueError(f"head_k_dims has {len(dims)} entries for {len(layers)} RWKV-7 layers")
        for attn, dk in zip(layers, dims or []):
            if int(dk) != attn.head_dim:
                set_key_dim(attn, int(dk))


AutoConfig.register(PrunedRWKV7Config.model_type, PrunedRWKV7Config, exist_ok=True)
AutoModelForCausalLM.register(PrunedRWKV7Config, PrunedRWKV7ForCausalLM, exist_ok=True)
