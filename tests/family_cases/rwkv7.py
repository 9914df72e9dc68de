"""fla RWKV-7 (`rwkv7`): 2 layers, 2 heads of dk = dv = 32, fla's fused norms (LayerNorm, GroupNorm, l2norm).

reference_states is written from RWKV-7's definition (fla/layers/rwkv7.py, the RWKV-7 paper), not from the project's
ops: token shift δ_t = x_{t−1} − x_t and the mixes x + δ·x_*, r/k projections, the decay LoRA
w = −e^{-1/2}·sigmoid(w_lora x_w), the in-context rate α = sigmoid(a_lora x_a), the removal key
κ̂ = (k ⊙ k_k)/‖k ⊙ k_k‖ per head (eps 1e-6 under the root), k ← k ⊙ (1 + (α − 1) ⊙ k_a), and the state loop
S ← Diag(e^w) S − (κ̂ ⊙ α)(κ̂ᵀ S) + k vᵀ (K-first). v of layer 0 is the layer's own; later layers mix in layer 0's
values (v_first, as layer 0 returned it in the same forward: `make_model` hooks layer 0 to keep it).
"""
from __future__ import annotations

import torch

from family_cases import FamilyCase, layer_input

SIZES = dict(hidden_size=64, num_hidden_layers=2, head_dim=32, decay_low_rank_dim=8, gate_low_rank_dim=8,
             a_low_rank_dim=8, v_low_rank_dim=8, vocab_size=256, tie_word_embeddings=True)


def make_model(seed: int = 0, **overrides):
    import analysis  # noqa: F401  (CPU routing, pruned_rwkv7 registration)
    from fla.models import RWKV7Config
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(RWKV7Config(**{**SIZES, **overrides})).eval()
    with torch.no_grad():  # fla's init zeroes the LoRAs' first linears and the outputs, sets k_a, r_k to constants: give every
        for block in model.model.layers:  # key-channel parameter a token- and channel-dependent value
            attn = block.attn
            if not hasattr(attn, "w_lora"):   # a hybrid's softmax block
                continue
            for lora in (attn.w_lora, attn.a_lora, attn.g_lora, getattr(attn, "v_lora", None)):
                if lora is not None:
                    lora.lora[0].weight.normal_(0, 0.5)
                    lora.lora[2].weight.normal_(0, 0.5)
            attn.k_k.normal_(0.7, 0.3)
            attn.k_a.normal_(1.0, 0.3)
            attn.r_k.normal_(0, 0.5)
            attn.k_proj.weight.normal_(0, 0.2)
            attn.o_proj.weight.normal_(0, 0.2)        # fla zero-initialises the layer's and the FFN's outputs
            block.ffn.value.weight.normal_(0, 0.2)
    first = model.model.layers[0].attn
    first.register_forward_hook(lambda m, _args, out: setattr(m, "case_v_first", out[3].detach()))
    return model


def reference_states(model, layer_index: int, hidden_in: torch.Tensor) -> torch.Tensor:
    """All states [B,T,H,dk,dv] (K-first) of RWKV-7 layer `layer_index` (the state needs w, k, κ̂, α and v, not r)."""
    from analysis.archs.rwkv7 import ADAPTER
    attn, x = layer_input(ADAPTER, model, layer_index, hidden_in)
    first = ADAPTER.linear_layers(model)[0]
    with torch.no_grad():
        B, T, _ = x.shape
        H, dk, dv = attn.num_heads, attn.head_dim, attn.head_v_dim
        shift = lambda z: torch.cat([torch.zeros_like(z[:, :1]), z[:, :-1]], 1) - z   # noqa: E731
        mix = lambda z, p: z + shift(z) * p.view(-1)                                 # noqa: E731
        w = -0.6065306597126334 * torch.sigmoid(attn.w_lora(mix(x, attn.x_w)))
        k = attn.k_proj(mix(x, attn.x_k))
        v = attn.v_proj(mix(x, attn.x_v))
        if layer_index > 0:  # later layers mix in layer 0's values (v_first) at a per-channel, per-token rate
            v = torch.lerp(v, first.case_v_first.float(), torch.sigmoid(attn.v_lora(mix(x, attn.x_v))))
        alpha = torch.sigmoid(attn.a_lora(mix(x, attn.x_a)))
        kappa = (k * attn.k_k).view(B, T, H, dk)
        kappa = kappa / torch.sqrt(kappa.square().sum(-1, keepdim=True) + 1e-6)
        k = (k * (1 + (alpha - 1) * attn.k_a)).view(B, T, H, dk)
        w, alpha, v = w.view(B, T, H, dk), alpha.view(B, T, H, dk), v.view(B, T, H, dv)
        S = x.new_zeros(B, H, dk, dv)
        states = []
        for t in range(T):
            removed = torch.einsum("bhk,bhkv->bhv", kappa[:, t], S)                   # κ̂ᵀ S
            S = w[:, t].exp()[..., None] * S - (kappa[:, t] * alpha[:, t])[..., None] * removed[:, :, None, :] \
                + k[:, t, :, :, None] * v[:, t, :, None, :]
            states.append(S.clone())
        return torch.stack(states, dim=1)


CASE = FamilyCase(name="rwkv7", make_model=make_model, reference_states=reference_states)
