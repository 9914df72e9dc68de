"""Gated linear attention (GLA): linear attention with one decay per key channel, chunked, plus its token loop.

Recurrence per head, K-first state S ∈ R^{dk×dv} (fla's `naive_recurrent_gla`):
    S_t = Diag(e^{g_t}) S_{t−1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
No delta-rule correction and no β; g [B,T,H,dk] is the log-decay (fla's GLA layer: logsigmoid(gk_proj x) / 16).

Chunk form (C tokens, G_i = Σ_{j≤i} g_j inside the chunk, per channel):
    o_i = (q_i ⊙ e^{G_i})ᵀ S_0 + Σ_{j≤i} [Σ_c q_ic k_jc e^{Σ_{j<l≤i} g_lc}] v_j
    S_C = Diag(e^{G_C}) S_0 + Σ_j (k_j ⊙ e^{G_C − G_j}) v_jᵀ
The intra-chunk weights are `delta_rule.channel_products` (sums of the tokens between j and i, never differences
of long cumulative sums), as for KDA's per-channel decay.
"""
from __future__ import annotations

import torch

from analysis.runtime.cpu_ops.delta_rule import StateSink, channel_products, hand_over, states_in_chunk, to_chunks, to_end


def chunked_gated_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                                   scale: float = 1.0, initial_state: torch.Tensor | None = None,
                                   chunk_size: int = 64, sink: StateSink | None = None
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k, g [B,T,H,dk]; v [B,T,H,dv]; initial_state [B,H,dk,dv] → o [B,T,H,dv] and the final state [B,H,dk,dv],
    float32; a `sink` gets the states it asks for (formed without gradient)."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    C = min(chunk_size, 1 << max(0, T - 1).bit_length())   # a short sequence: one chunk of its own size
    q, k, v, g = (to_chunks(x, C) for x in (q, k, v, g))   # padded tokens: k = v = 0, g = 0 leave S unchanged
    n_chunks = k.shape[2]
    intra = channel_products(q, k, g) @ v                                  # [B,H,N,C,dv]
    q_decayed = q * g.cumsum(-2).exp()                                      # e^{G_i} ⊙ q_i (G ≤ 0)
    k_to_end = k * to_end(g).exp()                                          # e^{G_C − G_j} ⊙ k_j
    chunk_decay = g.sum(-2).exp()                                           # e^{G_C} [B,H,N,dk]

    S = initial_state.float() if initial_state is not None else k.new_zeros(B, H, dk, dv)
    outs = []
    for n in range(n_chunks):
        outs.append(q_decayed[:, :, n] @ S + intra[:, :, n])
        if sink is not None:  # the chunk's states up to the last wanted token, then those tokens
            hand_over(sink, n * C, min(T, (n + 1) * C), lambda idx: states_in_chunk(
                S, k[:, :, n, :idx[-1] + 1], v[:, :, n, :idx[-1] + 1], g[:, :, n, :idx[-1] + 1])[:, :, idx.to(k.device)])
        S = chunk_decay[:, :, n, :, None] * S + k_to_end[:, :, n].transpose(-1, -2) @ v[:, :, n]
    o = torch.stack(outs, dim=2).reshape(B, H, n_chunks * C, dv)[:, :, :T]
    return scale * o.transpose(1, 2), S


def recurrent_gated_linear_attention(q, k, v, g, scale: float = 1.0, initial_state=None,
                                     return_all_states: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token loop of the same recurrence (the readable reference): o [B,T,H,dv] and the final state
    [B,H,dk,dv] or every state [B,T,H,dk,dv]."""
    B, T, H, dk = k.shape
    q, k, v, g = q.float(), k.float(), v.float(), g.float()
    S = initial_state.float().clone() if initial_state is not None else k.new_zeros(B, H, dk, v.shape[-1])
    outs, states = [], []
    for t in range(T):
        S = g[:, t].exp()[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(scale * torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
        if return_all_states:
            states.append(S)
    o = torch.stack(outs, dim=1)
    return o, (torch.stack(states, dim=1) if return_all_states else S)
