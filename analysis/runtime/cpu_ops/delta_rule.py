"""(Gated) delta rule in chunked WY form, plus the token-by-token loop it must equal.

Recurrence per head, K-first state S ∈ R^{dk×dv} (fla's convention):
    S_t = (I − β_t k_t k_tᵀ) D_t S_{t−1} + β_t k_t v_tᵀ,   o_t = scale · S_tᵀ q_t
with the decay D_t = α_t = exp(g_t) per head (Gated DeltaNet, g [B,T,H]) or D_t = Diag(exp(g_t)) per key
channel (Kimi Delta Attention, g [B,T,H,dk]; fla's naive_recurrent_kda also decays first, then updates).
DeltaNet is the case g ≡ 0. Inputs here are already prepared (l2-normalised q/k, β after sigmoid, g as
log-decay); the recurrence's `prepare` (analysis.runtime.recurrences) does that exactly as fla's kernels do.

Chunk form (chunk of C tokens, G_i = Σ_{j≤i} g_j inside the chunk, Γ_ij = exp(G_i − G_j) for j ≤ i):
    u_i = β_i (v_i − e^{G_i} S_0ᵀ k_i − Σ_{j<i} Γ_ij (k_iᵀ k_j) u_j)
    ⇒ (I + A) U = diag(β)(V − diag(e^G) K S_0),   A_ij = β_i Γ_ij k_iᵀk_j  (j < i)
so U = Ũ − W S_0 with Ũ, W from one unit-triangular solve per chunk (all chunks at once); only the
chunk-to-chunk state hand-off is sequential. Γ is formed from differences G_i − G_j ≤ 0, never from
e^{−G_j}, so strong decay cannot overflow.

Per key channel (KDA, `_chunked_per_channel`) G_i is a vector, Γ_ijc = exp(G_ic − G_jc), e^{G_i} S_0 becomes
Diag(e^{G_i}) S_0 and every k_iᵀk_j / q_iᵀk_j becomes Σ_c k_ic Γ_ijc k_jc. Those weights are matmuls over
recursive halves of the chunk (`channel_products`) whose exponents are sums of the tokens between i and j,
never differences of long cumulative sums (which lose small per-token decays to fp32 rounding).
"""
from __future__ import annotations

from typing import Protocol

import torch


class StateSink(Protocol):
    """Receives the states at the positions it asks for, chunk by chunk; no other state is ever formed."""

    def wanted(self, start: int, stop: int) -> torch.Tensor:
        """Offsets t − start (int64, ascending) of the tokens in [start, stop) whose state is wanted."""

    def take(self, start: int, offsets: torch.Tensor, states: torch.Tensor) -> None:
        """states [B, H, len(offsets), dk, dv]: the state after token start + offsets[i]."""


def states_at(S0: torch.Tensor, G: torch.Tensor, decay: torch.Tensor, k: torch.Tensor, U: torch.Tensor,
              idx: torch.Tensor) -> torch.Tensor:
    """States after the chunk's tokens idx only: S_t = e^{G_t} S_0 + Σ_{j≤t} Γ_tj k_j u_jᵀ.

    S0 [B,H,dk,dv] (state entering the chunk); k [B,H,C,dk]; U [B,H,C,dv]; G [B,H,C] and Γ [B,H,C,C] for a
    per-head gate, or G [B,H,C,dk] and Γ [B,H,C,C,dk] for a per-key-channel one (Γ acts on k's channels).
    Costs P·C·dk·dv for P = len(idx) instead of C·C·dk·dv for every token, and holds the decayed keys
    (P·C·dk) and the states (P·dk·dv) only: the keys are laid out [P·dk, C] so one matmul reads U as it is (a
    broadcast U[:, :, None] would be copied P times), and the S_0 term is added in place.
    """
    G_t, decay_t = G[:, :, idx], decay[:, :, idx]                  # [B,H,P(,dk)], [B,H,P,C(,dk)]
    if G_t.dim() == 3:                                              # per-head gate: same for every channel
        G_t, decay_t = G_t[..., None], decay_t[..., None]
    B, H, P, C, dk = *decay_t.shape[:4], k.shape[-1]
    keys_t = torch.empty(B, H, P, dk, C, dtype=torch.result_type(decay_t, k), device=k.device)
    torch.mul(decay_t.transpose(-1, -2), k.transpose(-1, -2)[:, :, None], out=keys_t)   # Γ_tj k_j, [B,H,P,dk,C]
    states = (keys_t.view(B, H, P * dk, C) @ U).view(B, H, P, dk, U.shape[-1])
    del keys_t
    return states.addcmul_(G_t.exp()[..., None], S0[:, :, None])


def hand_over(sink: StateSink, start: int, stop: int, form) -> None:
    """Ask `sink` which states of tokens [start, stop) it wants; form exactly those (`form(offsets)`, no grad)."""
    offsets = torch.as_tensor(sink.wanted(start, stop), dtype=torch.long)
    if len(offsets):
        with torch.no_grad():
            sink.take(start, offsets, form(offsets))


def to_end(g: torch.Tensor) -> torch.Tensor:
    """Σ_{j<l≤last} g_l for every position j along dim −2 (summed from the end: exact for strong decay)."""
    after = g.flip(-2).cumsum(-2).flip(-2)                                    # Σ_{l≥j}
    return torch.cat([after[..., 1:, :], torch.zeros_like(after[..., :1, :])], dim=-2)


def channel_products(x: torch.Tensor, y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """P_ij = Σ_c x_ic y_jc exp(Σ_{j<l≤i} g_lc) for j ≤ i, 0 above; x, y, g [..., C, dk] -> [..., C, C].

    Recursive halving: for i in the right half of a block and j in its left half, the exponent splits at the
    left half's last token into a prefix sum of the right half and a suffix sum of the left half, both ≤ 0,
    so each such block pair is one matmul of decayed x and y that cannot overflow; the halves recurse down to
    single tokens (exponent 0). Costs about one C×C×dk matmul, like the per-head k kᵀ."""
    *batch, C, dk = x.shape
    size = 1 << (C - 1).bit_length()
    if size != C:  # zero tokens (g = 0) up to a power of two change nothing
        x, y, g = (torch.nn.functional.pad(t, (0, 0, 0, size - C)) for t in (x, y, g))
    P = x.new_zeros(*batch, size, size)
    diagonal = torch.arange(size, device=x.device)
    P[..., diagonal, diagonal] = (x * y).sum(-1)
    m = size
    while m > 1:
        h, blocks = m // 2, size // m
        xb, yb, gb = (t.reshape(*batch, blocks, 2, h, dk) for t in (x, y, g))
        right = xb[..., 1, :, :] * gb[..., 1, :, :].cumsum(-2).exp()          # e^{Σ_{r<l≤i} g} x_i
        left = yb[..., 0, :, :] * to_end(gb[..., 0, :, :]).exp()             # e^{Σ_{j<l≤r} g} y_j
        start = torch.arange(blocks, device=x.device)[:, None] * m
        rows = start + h + torch.arange(h, device=x.device)
        cols = start + torch.arange(h, device=x.device)
        P[..., rows[:, :, None], cols[:, None, :]] = right @ left.transpose(-1, -2)
        m = h
    return P[..., :C, :C]


def states_in_chunk(S: torch.Tensor, k: torch.Tensor, U: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """State after every token of a chunk, per key channel: S_t = Diag(e^{g_t}) S_{t−1} + k_t u_tᵀ (u known)."""
    states = []
    for t in range(k.shape[-2]):
        S = g[..., t, :, None].exp() * S + k[..., t, :, None] * U[..., t, None, :]
        states.append(S)
    return torch.stack(states, dim=2)


def _chunked_per_channel(q, k, v, beta, g, scale, initial_state, T, sink):
    """chunked_delta_rule for a per-key-channel log-decay; inputs already in chunks [B,H,N,C,...]."""
    B, H, N, C, dk = k.shape
    dv = v.shape[-1]
    A = (beta[..., :, None] * channel_products(k, k, g)).tril(-1)
    qk = channel_products(q, k, g)                                         # intra-chunk readout weights
    G = g.cumsum(-2)                                                        # from the chunk start: ≤ 0
    eye = torch.eye(C, dtype=A.dtype, device=A.device)
    rhs = torch.cat([beta[..., None] * G.exp() * k, beta[..., None] * v], dim=-1)
    sol = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    W, U_tilde = sol[..., :dk], sol[..., dk:]
    q_decayed = q * G.exp()
    k_to_end = k * to_end(g).exp()                                         # e^{G_C − G_j} ⊙ k_j

    S = initial_state.float() if initial_state is not None else k.new_zeros(B, H, dk, dv)
    outs = []
    for n in range(N):
        U = U_tilde[:, :, n] - W[:, :, n] @ S
        outs.append(q_decayed[:, :, n] @ S + qk[:, :, n] @ U)
        if sink is not None:  # the recursion up to the last wanted token, then those tokens
            hand_over(sink, n * C, min(T, (n + 1) * C), lambda idx: states_in_chunk(
                S, k[:, :, n, :idx[-1] + 1], U[:, :, :idx[-1] + 1], g[:, :, n, :idx[-1] + 1])[:, :, idx.to(k.device)])
        S = G[:, :, n, -1, :, None].exp() * S + k_to_end[:, :, n].transpose(-1, -2) @ U
    o = torch.stack(outs, dim=2).reshape(B, H, N * C, dv)[:, :, :T]
    return scale * o.transpose(1, 2), S


def to_chunks(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """[B,T,H,...] -> [B,H,N,C,...] in float32, zero-padded to whole chunks (a padded token with zero inputs
    and zero log-decay leaves the state unchanged)."""
    x = x.float().transpose(1, 2)
    n_chunks = max(1, -(-x.shape[2] // chunk_size))
    pad = n_chunks * chunk_size - x.shape[2]
    if pad:
        x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
    return x.reshape(*x.shape[:2], n_chunks, chunk_size, *x.shape[3:])


def chunked_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    chunk_size: int = 64,
    sink: StateSink | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k [B,T,H,dk]; v [B,T,H,dv]; beta [B,T,H]; g [B,T,H] or [B,T,H,dk]; initial_state [B,H,dk,dv].

    Returns o [B,T,H,dv] and the final state [B,H,dk,dv], both float32. A `sink` receives the states
    at the positions it wants (see StateSink), formed without gradient.
    """
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    scale = dk ** -0.5 if scale is None else scale
    C = chunk_size
    n_chunks = max(1, -(-T // C))

    def chunks(x: torch.Tensor) -> torch.Tensor:
        return to_chunks(x, C)  # padded tokens have β = 0 and g = 0, so they leave S unchanged

    q, k, v, beta = chunks(q), chunks(k), chunks(v), chunks(beta)
    if g is not None and g.dim() == 4:
        return _chunked_per_channel(q, k, v, beta, chunks(g), scale, initial_state, T, sink)
    G = chunks(g).cumsum(-1) if g is not None else torch.zeros_like(beta)

    causal = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    diff = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf"))
    decay = diff.exp()                                                   # Γ, zero above the diagonal
    A = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    eye = torch.eye(C, dtype=A.dtype, device=A.device)
    rhs = torch.cat([(beta * G.exp())[..., None] * k, beta[..., None] * v], dim=-1)
    sol = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    W, U_tilde = sol[..., :dk], sol[..., dk:]
    qk = (q @ k.transpose(-1, -2)) * decay                                # intra-chunk readout weights
    q_decayed = q * G.exp()[..., None]
    k_to_end = k * decay[..., -1, :, None]                                # e^{G_C − G_j} k_j

    S = (initial_state.float() if initial_state is not None
         else k.new_zeros(B, H, dk, dv))
    outs = []
    for n in range(n_chunks):
        U = U_tilde[:, :, n] - W[:, :, n] @ S
        outs.append(q_decayed[:, :, n] @ S + qk[:, :, n] @ U)
        if sink is not None:
            hand_over(sink, n * C, min(T, (n + 1) * C),
                       lambda idx: states_at(S, G[:, :, n], decay[:, :, n], k[:, :, n], U, idx.to(k.device)))
        S = G[:, :, n, -1, None, None].exp() * S + k_to_end[:, :, n].transpose(-1, -2) @ U
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
