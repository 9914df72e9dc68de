"""Rank utilization at EVERY token, all layers and heads: ours vs the reference approach, side by side.

Reference (as camail-official/LinearAttentionPruning's effective_state_rank.py does it): hook the
post-conv q/k/v and β, then a token-by-token Python recurrence per layer, and per head and token a
LAPACK spectral norm (numpy.linalg.norm(ord=2), a full SVD) plus the Frobenius norm. Here it is run for
every sequence of the batch so both methods produce the same numbers (the reference code itself only
kept batch element 0).
Ours: analysis.inspect.rank_trace — the same recurrence compiled (numba), s1² tracked by a warm-started
Rayleigh–Ritz iteration instead of an SVD per token.
Both start from the same recorded recurrence inputs (one shared model forward, timed separately and
also reported end to end) and are timed layer by layer in turn, so machine noise falls on both alike.
Last line: `speedup_vs_reference: N` (the trace computation, same inputs).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import analysis  # noqa: E402

analysis.ready()  # the CPU path for fla's ops and the project's model types
from analysis.data import corpus as data
from analysis.models import load as models  # noqa: E402
from analysis.runtime.backend import observe_recurrences  # noqa: E402
from analysis.inspect.rank_trace import utilization_trace  # noqa: E402


def record_inputs(model, ids) -> list:
    """The prepared recurrence inputs of every layer, from one forward pass."""
    recorded = []
    with torch.no_grad(), observe_recurrences(recorded.append):
        model(ids, use_cache=False)
    return recorded


def reference_trace(r) -> np.ndarray:
    """u [B, H, T] of one layer from a Python token loop and numpy SVD norms (the reference approach)."""
    k, v, beta = r.k.numpy(), r.v.numpy(), r.beta.numpy()
    decay = np.exp(r.g.numpy()) if r.g is not None else None
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    u = np.zeros((B, H, T))
    for b in range(B):
        S = np.zeros((H, dk, dv), dtype=np.float32)
        for t in range(T):
            if decay is not None:
                S = S * decay[b, t][:, None, None]
            kt = k[b, t]
            err = v[b, t] - np.einsum("hkv,hk->hv", S, kt)
            S = S + beta[b, t][:, None, None] * kt[:, :, None] * err[:, None, :]
            for h in range(H):
                spec = np.linalg.norm(S[h], 2)
                fro = np.linalg.norm(S[h])
                u[b, h, t] = 0.0 if spec == 0 else fro ** 2 / spec ** 2 / min(dk, dv)
    return u


def forward_tokens_per_s(model, ids, token_loop: bool = False) -> float:
    """Best of 3 no-grad forwards; `token_loop` swaps the chunked recurrence for the per-token loop."""
    from analysis.runtime.recurrences import RECURRENCES
    if token_loop:   # every kind runs its token-by-token reference instead of its chunked op
        for rec in RECURRENCES.values():
            rec.chunked = lambda r, sink=None, rec=rec: rec.loop(r)
    try:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            with torch.no_grad():
                model(ids, use_cache=False)
            best = min(best, time.perf_counter() - t0)
    finally:
        for rec in RECURRENCES.values():
            rec.__dict__.pop("chunked", None)
    return ids.numel() / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deltanet-small")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = models.load_model(args.model, device="cpu")
    tok = models.load_tokenizer(model)
    ids = data.token_windows(data.encode(data.load_text("test"), tok), args.tokens, max_windows=args.batch)
    info = models.describe(model)
    print(f"model {args.model}: {info.layers} layers × {info.heads} heads, dk {info.head_k_dims[0]}, "
          f"dv {info.head_v_dim}; {len(ids)} test windows × {args.tokens} tokens; CPU float32, "
          f"{args.threads} threads")
    t0 = time.perf_counter()
    recorded = record_inputs(model, ids)
    t_forward = time.perf_counter() - t0
    t0 = time.perf_counter()
    utilization_trace(record_inputs(model, ids[:1, :8])[0])  # load (or compile) the kernel once
    t_jit = time.perf_counter() - t0

    # layer by layer, the two methods in turn, so both are timed through the same spells of machine noise
    ref, ours, t_ref, t_ours, t_one = [], [], 0.0, 0.0, 0.0
    for r in recorded:
        t0 = time.perf_counter()
        ref.append(reference_trace(r))
        t_ref += time.perf_counter() - t0
        runs = []
        for _ in range(3):  # ours is short, so noise weighs more: the median of three runs per layer
            t0 = time.perf_counter()
            out = utilization_trace(r)
            runs.append(time.perf_counter() - t0)
        t_ours += float(np.median(runs))
        ours.append(out)
        t0 = time.perf_counter()  # and once on one thread, as the reference runs
        utilization_trace(r, threads=1)
        t_one += time.perf_counter() - t0

    n = sum(u.size for u in ref)
    du = max(float(np.abs(o["rank_utilization"].numpy() - r).max()) for o, r in zip(ours, ref))
    ritz_steps = np.mean([float(o["mean_ritz_steps"]) for o in ours])
    print(f"shared model forward (records the recurrence inputs): {t_forward:.2f} s; "
          f"kernel load/compile once per process: {t_jit:.1f} s (not in the timings below)")
    print(f"reference: {t_ref:8.2f} s  ({t_ref / n * 1e6:.1f} µs per token·head, {n} states)")
    print(f"ours:      {t_ours:8.3f} s  ({t_ours / n * 1e6:.2f} µs per token·head, per layer the median of three "
          f"runs; {ritz_steps:.2f} Rayleigh–Ritz steps per token on average)")
    print(f"ours on one thread: {t_one:.3f} s ({t_one / n * 1e6:.2f} µs per token·head, {t_ref / t_one:.1f}× the "
          f"reference; the {args.threads}-thread figure also depends on how much of the second core the host leaves)")
    print(f"max |Δu| = {du:.2e} (target ≤ 1e-4)")
    print(f"end to end, forward included: reference {t_forward + t_ref:.2f} s, ours {t_forward + t_ours:.2f} s "
          f"→ {(t_forward + t_ref) / (t_forward + t_ours):.1f}×")
    print(f"CPU forward, {info.parameters / 1e6:.2f} M parameters, {len(ids)}×{args.tokens} tokens: "
          f"chunked path {forward_tokens_per_s(model, ids):,.0f} tokens/s, "
          f"token loop {forward_tokens_per_s(model, ids, token_loop=True):,.0f} tokens/s")
    print(f"speedup_vs_reference: {t_ref / t_ours:.1f}")


if __name__ == "__main__":
    main()
