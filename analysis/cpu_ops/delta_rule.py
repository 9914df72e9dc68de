"""(Gated) delta rule in chunked WY form, plus the token-by-token loop it must equal.

Recurrence per head, K-first state S ∈ R^{dk×dv} (fla's convention):
    S_t = (I − β_t k_t k_tᵀ) D_t S_{t−1} + β_t k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
with the decay D_t = α_t = exp(g_t) per head (Gated DeltaNet, g [B,T,H]) or D_t = Diag(exp(g_t)) per key
channel (Kimi Delta Attention, g [B,T,H,dk]: fla's naive_recurrent_kda decays first, then updates).
DeltaNet is the case g ≡ 0. Inputs here are already prepared (l2-normalised q/k, β after sigmoid, g as
log-decay); `analysis.backend` does that preparation exactly as fla's kernels do.

Chunk form (chunk of C tokens, G_i = Σ_{j≤i} g_j inside the chunk, Γ_ij = exp(G_i − G_j) for j ≤ i):
    u_i = β_i (v_i − e^{G_i} S_0ᵀ k_i − Σ_{j<i} Γ_ij (k_iᵀ k_j) u_j)
    ⇒ (I + A) U = diag(β)(V − diag(e^G) K S_0),   A_ij = β_i Γ_ij k_iᵀk_j  (j < i)
so U = Ũ − W S_0 with Ũ, W from one unit-triangular solve per chunk (all chunks at once); only the
chunk-to-chunk state hand-off is sequential. Γ is formed from differences G_i − G_j ≤ 0, never from
e^{−G_j}, so strong decay cannot overflow.

Per key channel (KDA) G_i is a vector, Γ_ijc = exp(G_ic − G_jc), and every k_iᵀk_j / q_iᵀk_j above becomes
Σ_c k_ic Γ_ijc k_jc (so A and the readout weights cost a [C, C, dk] tensor per chunk, built a few chunks at
a time); e^{G_i} S_0 becomes Diag(e^{G_i}) S_0. There each exponent G_ic − G_jc is summed from the tokens
between i and j, not subtracted: fp32 keeps the per-token decays even where the cumulative one is large. The per-head path is the same code with a
channel axis of size 1 where the decay multiplies a vector, and its own k kᵀ products.
"""
from __future__ import annotations

from typing import Callable

import torch

# on_chunk(start, states) receives the state after every token of one chunk: states [B, H, c, dk, dv].
ChunkStatesCallback = Callable[[int, torch.Tensor], None]

PAIR_BUDGET = 1 << 24  # elements of one [.., C, C, dk] per-channel decay block (64 MiB in fp32)


def _channel_decay(g: torch.Tensor) -> torch.Tensor:
    """Γ_ijc = exp(Σ_{j<l≤i} g_lc) for j ≤ i, 0 above: per-token log-decays g [..., C, dk] -> [..., C, C, dk].

    Each exponent is summed from its own pair's tokens: G_i − G_j of two long cumulative sums would lose
    the small per-token decays to rounding once the cumulative decay is large (fp32, strong decay)."""
    C = g.shape[-2]
    after_j = torch.ones(C, C, dtype=torch.bool, device=g.device).tril(-1)      # [l, j]: l > j
    steps = g[..., :, None, :].masked_fill(~after_j[..., None], 0.0)            # [l, j, c]
    exponent = steps.cumsum(-3)                                                  # Σ_{j<l≤i}, i along dim -3
    causal = torch.ones(C, C, dtype=torch.bool, device=g.device).tril()
    return exponent.masked_fill(~causal[..., None], float("-inf")).exp()


def _channel_products(x: torch.Tensor, y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Σ_c x_ic Γ_ijc y_jc for x, y, g [B,H,N,C,dk] -> [B,H,N,C,C], a few chunks at a time (bounded memory)."""
    B, H, N, C, dk = x.shape
    step = max(1, PAIR_BUDGET // max(1, B * H * C * C * dk))
    return torch.cat([torch.einsum("bhnic,bhnijc,bhnjc->bhnij", x[:, :, s:s + step],
                                   _channel_decay(g[:, :, s:s + step]), y[:, :, s:s + step])
                      for s in range(0, N, step)], dim=2)


def _to_chunk_end(g: torch.Tensor) -> torch.Tensor:
    """Σ_{j<l≤C} g_l for every j of a chunk (g [..., C, dk]), summed from the chunk's end."""
    after = g.flip(-2).cumsum(-2).flip(-2)                                       # Σ_{l≥j}
    return torch.cat([after[..., 1:, :], torch.zeros_like(after[..., :1, :])], dim=-2)


def chunked_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
    on_chunk: ChunkStatesCallback | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k [B,T,H,dk]; v [B,T,H,dv]; beta [B,T,H]; g [B,T,H] or [B,T,H,dk]; initial_state [B,H,dk,dv].

    Returns o [B,T,H,dv] and the final state [B,H,dk,dv], both float32.
    """
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    scale = dk ** -0.5 if scale is None else scale
    C = chunk_size
    n_chunks = max(1, -(-T // C))
    pad = n_chunks * C - T

    def chunks(x: torch.Tensor) -> torch.Tensor:
        # [B,T,H,...] -> [B,H,N,C,...]; padded tokens have β = 0 and g = 0, so they leave S unchanged.
        x = x.float().transpose(1, 2)
        if pad:
            x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
        return x.reshape(B, H, n_chunks, C, *x.shape[3:])

    q, k, v, beta = chunks(q), chunks(k), chunks(v), chunks(beta)
    per_channel = g is not None and g.dim() == 4
    if per_channel:  # g per token and key channel; Ge [B,H,N,C,dk] its cumulative sum within the chunk
        g = chunks(g)
        Ge = g.cumsum(-2)
        A = (beta[..., :, None] * _channel_products(k, k, g)).tril(-1)
        qk = _channel_products(q, k, g)                                   # intra-chunk readout weights
        k_to_end = k * _to_chunk_end(g).exp()                             # e^{G_C − G_j} ⊙ k_j
        pair_eq = "bhtjc,bhjc,bhjv->bhtcv"
        pair_decay = lambda n: _channel_decay(g[:, :, n])                 # noqa: E731  (Γ of chunk n)
    else:
        G = chunks(g).cumsum(-1) if g is not None else torch.zeros_like(beta)
        causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
        diff = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf"))
        decay = diff.exp()                                               # Γ, zero above the diagonal
        A = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
        qk = (q @ k.transpose(-1, -2)) * decay                            # intra-chunk readout weights
        k_to_end = k * decay[..., -1, :, None]                            # e^{G_C − G_j} k_j
        Ge = G[..., None]                                                 # a channel axis of size 1
        pair_eq = "bhtj,bhjk,bhjv->bhtkv"
        pair_decay = lambda n: decay[:, :, n]                             # noqa: E731
    eye = torch.eye(C, dtype=A.dtype, device=A.device)
    rhs = torch.cat([(beta[..., None] * Ge.exp()) * k, beta[..., None] * v], dim=-1)
    sol = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    W, U_tilde = sol[..., :dk], sol[..., dk:]
    q_decayed = q * Ge.exp()

    S = (initial_state.float() if initial_state is not None
         else k.new_zeros(B, H, dk, dv))
    outs = []
    for n in range(n_chunks):
        U = U_tilde[:, :, n] - W[:, :, n] @ S
        outs.append(q_decayed[:, :, n] @ S + qk[:, :, n] @ U)
        if on_chunk is not None:
            valid = min(C, T - n * C)
            states = (Ge[:, :, n, :, :, None].exp() * S[:, :, None]
                      + torch.einsum(pair_eq, pair_decay(n), k[:, :, n], U))
            on_chunk(n * C, states[:, :, :valid])
        S = Ge[:, :, n, -1, :, None].exp() * S + k_to_end[:, :, n].transpose(-1, -2) @ U
    o = torch.stack(outs, dim=2).reshape(B, H, n_chunks * C, dv)[:, :, :T]
    return scale * o.transpose(1, 2), S


def recurrent_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    return_all_states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token loop of the same recurrence: the readable reference for the chunked form.

    g [B,T,H] (per head) or [B,T,H,dk] (per key channel); the state decays first, then takes the delta update.

    Returns o [B,T,H,dv] and either the final state [B,H,dk,dv] or all states [B,T,H,dk,dv].
    """
    B, T, H, dk = k.shape
    scale = dk ** -0.5 if scale is None else scale
    q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
    S = initial_state.float().clone() if initial_state is not None else k.new_zeros(B, H, dk, v.shape[-1])
    outs, states = [], []
    for t in range(T):
        if g is not None and g.dim() == 4:
            S = S * g[:, t].float().exp()[..., None]
        elif g is not None:
            S = S * g[:, t].float().exp()[..., None, None]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + k[:, t, :, :, None] * u[:, :, None, :]
        outs.append(scale * torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
        if return_all_states:
            states.append(S)
    o = torch.stack(outs, dim=1)
    return o, (torch.stack(states, dim=1) if return_all_states else S)
