"""Linear attention with a scalar decay per head (Mamba-2's SSD, simple GLA), chunked, plus its token loop.

Recurrence per head, K-first state S ∈ R^{dk×dv}:
    S_t = e^{g_t} S_{t−1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
No delta-rule correction and no β: whatever weights the update (Mamba-2's dt) is already folded into v.

Chunk form (C tokens, G_i = Σ_{j≤i} g_j inside the chunk, Γ_ij = e^{G_i − G_j} for j ≤ i, from differences so
strong decay cannot overflow): o_i = e^{G_i} S_0ᵀ q_i + Σ_{j≤i} Γ_ij (q_iᵀ k_j) v_j; the state after token t is
e^{G_t} S_0 + Σ_{j≤t} Γ_tj k_j v_jᵀ, which is `delta_rule.states_at` with u = v (how a StateSink is fed).
"""
from __future__ import annotations

import torch

from analysis.runtime.cpu_ops.delta_rule import StateSink, hand_over, states_at, to_chunks


def chunked_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None,
                             scale: float = 1.0, initial_state: torch.Tensor | None = None, chunk_size: int = 64,
                             sink: StateSink | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k [B,T,H,dk]; v [B,T,H,dv]; g [B,T,H] log-decay (None: no decay); initial_state [B,H,dk,dv].

    Returns o [B,T,H,dv] and the final state [B,H,dk,dv], float32; a `sink` gets the states it asks for."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    C = chunk_size
    n_chunks = max(1, -(-T // C))

    def chunks(x: torch.Tensor) -> torch.Tensor:
        return to_chunks(x, C)  # padded tokens have k = v = 0 and g = 0: they leave S unchanged

    q, k, v = chunks(q), chunks(k), chunks(v)
    G = chunks(g).cumsum(-1) if g is not None else q.new_zeros(B, H, n_chunks, C)
    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    decay = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf")).exp()   # Γ, 0 above the diagonal
    intra = ((q @ k.transpose(-1, -2)) * decay) @ v                                          # [B,H,N,C,dv]
    q_decayed = q * G.exp()[..., None]
    k_to_end = k * decay[..., -1, :, None]                                                   # e^{G_C − G_j} k_j

    S = initial_state.float() if initial_state is not None else k.new_zeros(B, H, dk, dv)
    outs = []
    for n in range(n_chunks):
        outs.append(q_decayed[:, :, n] @ S + intra[:, :, n])
        if sink is not None:
            hand_over(sink, n * C, min(T, (n + 1) * C),
                      lambda idx: states_at(S, G[:, :, n], decay[:, :, n], k[:, :, n], v[:, :, n], idx.to(k.device)))
        S = G[:, :, n, -1, None, None].exp() * S + k_to_end[:, :, n].transpose(-1, -2) @ v[:, :, n]
    o = torch.stack(outs, dim=2).reshape(B, H, n_chunks * C, dv)[:, :, :T]
    return scale * o.transpose(1, 2), S


def recurrent_linear_attention(q, k, v, g=None, scale: float = 1.0, initial_state=None,
                               return_all_states: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token loop of the same recurrence (the readable reference): o [B,T,H,dv] and the final state
    [B,H,dk,dv] or every state [B,T,H,dk,dv]."""
    B, T, H, dk = k.shape
    q, k, v = q.float(), k.float(), v.float()
    S = initial_state.float().clone() if initial_state is not None else k.new_zeros(B, H, dk, v.shape[-1])
    outs, states = [], []
    for t in range(T):
        if g is not None:
            S = S * g[:, t].float().exp()[..., None, None]
        S = S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(scale * torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
        if return_all_states:
            states.append(S)
    o = torch.stack(outs, dim=1)
    return o, (torch.stack(states, dim=1) if return_all_states else S)
