"""`pruned_kimi_linear`: transformers' Kimi Linear with its own key dim in every KDA layer.

KimiLinearConfig holds one `linear_head_dim` for q, k, v, the decay rows and the output gate, so no pruned key dim
(dk' < dv) can be said in the family's own type; this type adds per-KDA-layer `linear_key_head_dims` and
`readout_key_dims`. Each pruned layer re-creates its key-channel parameters at dk': q/k projections, the q|k part
of the q|k|v short convolution, and the per-key-channel decay rows (forget_gate.f_b_proj and dt_bias; the
low-rank f_a_proj bottleneck is not a key channel and stays). Its forward is transformers' with q/k viewed at
dk' and v, the output gate and o_norm at dv; the recurrence is the same module global (routed by device).

Readout scale: transformers reads out at dk'^-1/2 and o reaches only the per-head gated RMSNorm o_norm, whose
gate multiplies after the normalisation: RMSNorm(c·o, c²·eps) = RMSNorm(o, eps) with c² = dk/dk', so
o_norm.variance_epsilon·readout/dk' keeps the readout of key dim `readout` exactly (as for Qwen3.5 and fla).
MLA softmax blocks are untouched.

transformers keys its checkpoint conversion (Moonshot's hub layout: q/k/v_conv1d, per-expert w1/w2/w3) by model
type, so `pruned_kimi_linear` is saved in the runtime layout; this matters, as its reverse cuts the q|k|v conv
into equal thirds, which a pruned layer (2·H·dk' + H·dv rows) does not have.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.integrations.accelerate import force_accelerate_hooks
from transformers.models.kimi_linear import modeling_kimi_linear as modeling
from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention, KimiLinearForCausalLM

from analysis.archs.base import pruned_type
from analysis.archs.heads import apply_head_counts

PRUNED_TYPE = pruned_type("kimi_linear")


def kda_layers(model) -> list[KimiLinearDeltaAttention]:
    """The Kimi Delta Attention layers of a Kimi Linear model, in block order (MLA blocks skipped)."""
    return [b.self_attn for b in model.model.layers if isinstance(b.self_attn, KimiLinearDeltaAttention)]


def head_k_dim(layer: KimiLinearDeltaAttention) -> int:
    return getattr(layer, "head_k_dim", layer.head_dim)


class KeyDimKimiDeltaAttention(KimiLinearDeltaAttention):
    """transformers' KDA layer with q/k at `head_k_dim` channels per head and v, gate and o_norm at `head_dim`."""

    @force_accelerate_hooks("conv1d")  # as transformers' forward: conv1d's weight is read directly, not via forward
    def forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
        hidden_states = modeling.apply_mask_to_padding_states(hidden_states, attention_mask)
        batch_size, seq_len = hidden_states.shape[:2]
        key_dim = self.num_heads * self.head_k_dim
        mixed_qkv = torch.cat([self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)],
                              dim=-1).transpose(1, 2)
        if cache is not None:
            conv_state = cache.get_conv_state(self.layer_idx, state_idx=0)
            recurrent_state = cache.get_recurrent_state(self.layer_idx, state_idx=0)
        else:
            conv_state, recurrent_state = None, None
        conv_weight = self.conv1d.weight.squeeze(1)
        if conv_state is not None and seq_len == 1:
            mixed_qkv = modeling.causal_conv1d_update(mixed_qkv, conv_state, weight=conv_weight,
                                                      bias=self.conv1d.bias, activation=self.activation)
        else:
            if cache is not None:
                mixed_qkv = cache.update_conv_state(mixed_qkv, self.layer_idx, conv_kernel_size=self.conv_kernel_size)
            mixed_qkv = modeling.causal_conv1d_fn(mixed_qkv, weight=conv_weight, bias=self.conv1d.bias,
                                                  activation=self.activation, **kwargs)[:, :, -seq_len:]
        query, key, value = torch.split(mixed_qkv.transpose(1, 2), [key_dim, key_dim, self.qkv_dim], dim=-1)
        query, key = (x.reshape(batch_size, seq_len, -1, self.head_k_dim) for x in (query, key))
        value = value.reshape(batch_size, seq_len, -1, self.head_dim)
        g = self.forget_gate(hidden_states)                           # [B, T, H, dk']
        beta = torch.sigmoid(self.b_proj(hidden_states))
        step = recurrent_state is not None and seq_len == 1
        kernel = modeling.recurrent_kimi_delta_attention if step else modeling.chunk_kimi_delta_attention
        core_attn_out, last_recurrent_state = kernel(query, key, value, g=g, beta=beta, initial_state=recurrent_state,
                                                     output_final_state=cache is not None,
                                                     use_qk_l2norm_in_kernel=True, **kwargs)
        if cache is not None:
            cache.update_recurrent_state(last_recurrent_state.to(torch.float32), self.layer_idx)
        gate = self.g_b_proj(self.g_a_proj(hidden_states)).view(batch_size, seq_len, -1, self.head_dim)
        output = self.o_norm(core_attn_out, gate).reshape(batch_size, seq_len, -1)
        return self.o_proj(output)


def set_key_dim(layer: KimiLinearDeltaAttention, dk: int) -> None:
    """Re-create one KDA layer's key-channel parameters for `dk` channels per head (weights loaded afterwards)."""
    weight = layer.q_proj.weight
    key_dim = layer.num_heads * dk
    make = dict(device=weight.device, dtype=weight.dtype)
    layer.q_proj = nn.Linear(layer.hidden_size, key_dim, bias=False, **make)
    layer.k_proj = nn.Linear(layer.hidden_size, key_dim, bias=False, **make)
    conv = layer.conv1d
    conv_dim = 2 * key_dim + layer.qkv_dim
    layer.conv1d = nn.Conv1d(conv_dim, conv_dim, kernel_size=conv.kernel_size[0], groups=conv_dim,
                             padding=conv.padding[0], bias=conv.bias is not None,
                             device=conv.weight.device, dtype=conv.weight.dtype)
    gate = layer.forget_gate
    gate.f_b_proj = nn.Linear(gate.f_b_proj.in_features, key_dim, bias=False, **make)
    gate.dt_bias = nn.Parameter(torch.empty(key_dim, device=gate.dt_bias.device, dtype=gate.dt_bias.dtype))
    gate.head_dim, gate.qkv_dim = dk, key_dim          # the gate's view: [B, T, H, dk]
    layer.head_k_dim, layer.conv_dim = dk, conv_dim
    layer.__class__ = KeyDimKimiDeltaAttention


def keep_readout_scale(layer: KimiLinearDeltaAttention, readout_key_dim: int) -> None:
    """Make the normalised output that of readout scale readout_key_dim^-1/2 (see the module doc)."""
    layer.o_norm.variance_epsilon = layer.o_norm.variance_epsilon * readout_key_dim / head_k_dim(layer)


def shipped_parts():
    """KeyDimKimiDeltaAttention, verbatim, for a saved folder's own modeling file (it imports nothing of ours)."""
    import inspect

    from analysis.archs.shipped_code import ShippedParts
    return ShippedParts(
        imports="from transformers.integrations.accelerate import force_accelerate_hooks\n"
                "from transformers.models.kimi_linear import modeling_kimi_linear as modeling\n"
                "from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention",
        source=inspect.getsource(KeyDimKimiDeltaAttention), classes=(KeyDimKimiDeltaAttention.__name__,))


class PrunedKimiLinearConfig(KimiLinearConfig):
    model_type = PRUNED_TYPE


class PrunedKimiLinearForCausalLM(KimiLinearForCausalLM):
    config_class = PrunedKimiLinearConfig

    def __init__(self, config):
        super().__init__(config)
        apply_head_counts(self)   # heads first: set_key_dim sizes q/k and the decay rows for the kept heads
        layers = kda_layers(self)
        dims = getattr(config, "linear_key_head_dims", None)
        readout = getattr(config, "readout_key_dims", None)
        for name, values in (("linear_key_head_dims", dims), ("readout_key_dims", readout)):
            if values is not None and len(values) != len(layers):
                raise ValueError(f"{name} has {len(values)} entries for {len(layers)} KDA layers")
        for i, layer in enumerate(layers):
            if dims is not None and int(dims[i]) != head_k_dim(layer):
                set_key_dim(layer, int(dims[i]))
            if readout is not None:
                keep_readout_scale(layer, int(readout[i]))


AutoConfig.register(PRUNED_TYPE, PrunedKimiLinearConfig, exist_ok=True)
AutoModelForCausalLM.register(PrunedKimiLinearConfig, PrunedKimiLinearForCausalLM, exist_ok=True)
