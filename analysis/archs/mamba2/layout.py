"""Where the Mamba-2 families keep things (shared by the adapter and its pruned types; see mamba2.py)."""
from __future__ import annotations

import torch.nn as nn

# base model_type -> the config key that holds N
STATE_SIZE_KEYS = {"mamba2": "state_size", "nemotron_h": "ssm_state_size", "granitemoehybrid": "mamba_d_state",
                   "falcon_h1": "mamba_d_state", "bamba": "mamba_d_state", "zamba2": "mamba_d_state"}
# base model_type -> the config keys of (Mamba-2 heads, groups)
HEAD_GROUP_KEYS = {"mamba2": ("num_heads", "n_groups"), "nemotron_h": ("mamba_num_heads", "n_groups"),
                   "granitemoehybrid": ("mamba_n_heads", "mamba_n_groups"),
                   "falcon_h1": ("mamba_n_heads", "mamba_n_groups"), "bamba": ("mamba_n_heads", "mamba_n_groups"),
                   "zamba2": ("n_mamba_heads", "mamba_ngroups")}
MIXER_NAMES = ("mixer", "mamba", "self_attn")   # a decoder layer's token mixers, in this order
HOLDERS = ("shared_transformer", "mamba_decoder")  # Zamba2's hybrid layer: shared attention block, then its Mamba layer


def layers_of(model) -> nn.ModuleList:
    """The decoder layers of a causal LM or of its inner model (Mamba2ForCausalLM keeps them in `backbone`)."""
    if hasattr(model, "layers"):
        return model.layers
    return (model.backbone if hasattr(model, "backbone") else model.model).layers


def mixers_in(layer: nn.Module) -> list[nn.Module]:
    """The token mixers of one decoder layer in forward order (inside Zamba2's hybrid-layer holders too)."""
    out = []
    for holder in [layer, *(getattr(layer, h) for h in HOLDERS if isinstance(getattr(layer, h, None), nn.Module))]:
        out += [m for name in MIXER_NAMES if isinstance(m := getattr(holder, name, None), nn.Module)]
    return out


def is_mamba2_mixer(module: nn.Module) -> bool:
    return all(hasattr(module, a) for a in ("in_proj", "conv1d", "A_log", "ssm_state_size", "n_groups"))


def kind(module: nn.Module) -> str:
    if is_mamba2_mixer(module):
        return "linear"
    return "softmax" if hasattr(module, "q_proj") and hasattr(module, "k_proj") else "other"


FEED_FORWARD_NAMES = ("block_sparse_moe", "shared_mlp", "feed_forward", "mlp")   # a decoder layer's own MLP / MoE


def feed_forward_words(module: nn.Module, alone: bool = False) -> str:
    """A layer's feed-forward parts in words ("MoE feed-forward + shared MLP"), "" without any; `alone`: what the
    module itself is when it is an MLP or MoE block (Nemotron-H's "-" and "E" blocks)."""
    def words(m: nn.Module) -> str:
        name = type(m).__name__.lower()
        return "MoE feed-forward (mixture of experts)" if "moe" in name else "MLP feed-forward" if "mlp" in name else ""
    if alone:
        text = words(module)
        return f"{text}, not pruned" if text else ""
    parts = [("shared MLP" if n == "shared_mlp" else w) for n in FEED_FORWARD_NAMES
             if isinstance(m := getattr(module, n, None), nn.Module) and (w := words(m))]
    return " + ".join(parts) + " (not pruned)" if parts else ""
