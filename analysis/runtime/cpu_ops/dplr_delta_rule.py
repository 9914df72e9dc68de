"""Diagonal-plus-low-rank (DPLR) generalised delta rule (RWKV-7), chunked, plus its token loop.

Recurrence per head, K-first state S ∈ R^{dk×dv} (fla's `dplr_recurrence` in ops/generalized_delta_rule/dplr/naive.py):
    S_t = (Diag(e^{g_t}) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
i.e. V-first Sᵀ_t = Sᵀ_{t−1}(Diag(w_t) + a_t b_tᵀ) + v_t k_tᵀ with w = e^g. RWKV-7 passes a = −κ̂, b = κ̂ ⊙ α
(κ̂ the l2-normalised "removal key", α its in-context learning rate), so b aᵀ erases along κ̂ like a delta rule
with one rate per key channel; g is the log-decay, q the receptance r, scale 1.

Chunk form (C tokens; G_i = Σ_{j≤i} g_j and G⁻_i = G_i − g_i = Σ_{j<i} g_j inside the chunk, per channel). With
u_t = a_tᵀ S_{t−1} (what the low-rank term reads) the state unrolls to
    S_t = Diag(e^{G_t}) S_0 + Σ_{j≤t} Diag(e^{G_t − G_j}) (b_j u_j + k_j v_jᵀ)
so  u_t = (a_t ⊙ e^{G⁻_t})ᵀ S_0 + Σ_{j<t} L^{ab}_tj u_j + Σ_{j<t} L^{ak}_tj v_j,
    L^{xy}_tj = Σ_c x_tc y_jc e^{Σ_{j<l<t} g_lc}  (j < t),
⇒ (I − L^{ab}) U = A⁻ S_0 + L^{ak} V: one unit-triangular solve per chunk gives U = W S_0 + Ũ; then
    o_t = (q_t ⊙ e^{G_t})ᵀ S_0 + Σ_{j≤t} P^{qb}_tj u_j + P^{qk}_tj v_j,   P^{xy}_tj = Σ_c x_tc y_jc e^{Σ_{j<l≤t} g_lc}
    S_C = Diag(e^{G_C}) S_0 + Σ_j (b_j ⊙ e^{G_C − G_j}) u_j + (k_j ⊙ e^{G_C − G_j}) v_jᵀ.
Every weight is `delta_rule.channel_products` (exponents are sums of the tokens between j and t, never differences
of cumulative sums): L^{xy}_tj is P^{x'y}_{t−1,j} for x' = x shifted one token earlier.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from analysis.runtime.cpu_ops.delta_rule import StateSink, channel_products, hand_over, to_chunks, to_end


def _strictly_lower(x_next: torch.Tensor, y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """L_tj = Σ_c x_tc y_jc e^{Σ_{j<l<t} g_lc} for j < t (0 on and above the diagonal), from x_next_i = x_{i+1}."""
    P = channel_products(x_next, y, g)                                      # [.., C, C]: row i is token i + 1
    return F.pad(P, (0, 0, 1, 0))[..., :-1, :].tril(-1)


def _states_in_chunk(S, g, a, b, k, v) -> torch.Tensor:
    """The state after every token of a chunk, by the recurrence itself: S, then [.., t, dk, dv]."""
    states = []
    for t in range(k.shape[-2]):
        S = g[..., t, :, None].exp() * S + b[..., t, :, None] * (a[..., t, None, :] @ S) \
            + k[..., t, :, None] * v[..., t, None, :]
        states.append(S)
    return torch.stack(states, dim=2)


def chunked_dplr_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                            g: torch.Tensor, scale: float = 1.0, initial_state: torch.Tensor | None = None,
                            chunk_size: int = 64, sink: StateSink | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k, a, b, g [B,T,H,dk]; v [B,T,H,dv]; initial_state [B,H,dk,dv] → o [B,T,H,dv] and the final state
    [B,H,dk,dv], float32; a `sink` gets the states it asks for (formed without gradient)."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    C = min(chunk_size, 1 << max(0, T - 1).bit_length())   # a short sequence: one chunk of its own size
    q, k, v, a, b, g = (to_chunks(x, C) for x in (q, k, v, a, b, g))  # padded tokens: g = 0 and zero inputs: S kept
    n_chunks = k.shape[2]
    a_next = F.pad(a[..., 1:, :], (0, 0, 0, 1))                             # a_{t+1} at row t
    L_ab, L_ak = _strictly_lower(a_next, b, g), _strictly_lower(a_next, k, g)
    P_qb, P_qk = channel_products(q, b, g), channel_products(q, k, g)
    G = g.cumsum(-2)
    a_before = a * (G - g).exp()                                            # a_t ⊙ e^{G⁻_t}
    eye = torch.eye(C, dtype=L_ab.dtype, device=L_ab.device)
    sol = torch.linalg.solve_triangular(eye - L_ab, torch.cat([a_before, L_ak @ v], dim=-1), upper=False,
                                        unitriangular=True)
    W, U_tilde = sol[..., :dk], sol[..., dk:]
    q_decayed = q * G.exp()
    decay_to_end = to_end(g).exp()
    b_to_end, k_to_end = b * decay_to_end, k * decay_to_end
    intra = P_qk @ v                                                        # the k vᵀ writes' readout

    S = initial_state.float() if initial_state is not None else k.new_zeros(B, H, dk, dv)
    outs = []
    for n in range(n_chunks):
        U = W[:, :, n] @ S + U_tilde[:, :, n]                               # u_t = a_tᵀ S_{t−1}
        outs.append(q_decayed[:, :, n] @ S + P_qb[:, :, n] @ U + intra[:, :, n])
        if sink is not None:
            hand_over(sink, n * C, min(T, (n + 1) * C), lambda idx: _states_in_chunk(
                S, *(x[:, :, n, :idx[-1] + 1] for x in (g, a, b, k, v)))[:, :, idx.to(k.device)])
        S = (G[:, :, n, -1, :, None].exp() * S + b_to_end[:, :, n].transpose(-1, -2) @ U
             + k_to_end[:, :, n].transpose(-1, -2) @ v[:, :, n])
    o = torch.stack(outs, dim=2).reshape(B, H, n_chunks * C, dv)[:, :, :T]
    return scale * o.transpose(1, 2), S


def recurrent_dplr_delta_rule(q, k, v, a, b, g, scale: float = 1.0, initial_state=None,
                              return_all_states: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token loop of the same recurrence (the readable reference): o [B,T,H,dv] and the final state
    [B,H,dk,dv] or every state [B,T,H,dk,dv]."""
    B, T, H, dk = k.shape
    q, k, v, a, b, g = (x.float() for x in (q, k, v, a, b, g))
    S = initial_state.float().clone() if initial_state is not None else k.new_zeros(B, H, dk, v.shape[-1])
    outs, states = [], []
    for t in range(T):
        read = torch.einsum("bhk,bhkv->bhv", a[:, t], S)                    # a_tᵀ S_{t−1}
        S = g[:, t].exp()[..., None] * S + b[:, t, :, :, None] * read[:, :, None, :] \
            + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(scale * torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
        if return_all_states:
            states.append(S)
    o = torch.stack(outs, dim=1)
    return o, (torch.stack(states, dim=1) if return_all_states else S)
