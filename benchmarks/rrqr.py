"""Benchmark: `strong_rrqr` (one n×d factorisation, then d×d work) vs the reference approach
(`reference_rrqr`: a full n×d QR after every swap, defect B6).

Cases: (a) per-head calibration activations [5000, d] at ratio 0.5 (k = d/2), from
benchmarks/data/rrqr_activations.npz if present, else synthetic; (b) 5000×128 Kahan matrices where
plain column-pivoted QR violates ρ ≤ f, so swaps are needed. Times are the best of 3 runs.
Run: .venv/bin/python benchmarks/rrqr.py   (the last line is `speedup_vs_reference: <x>`)
"""
from __future__ import annotations

import os
import pathlib
import sys
import time

# Same resources for both methods, and timings that stay stable when other processes share the
# cores: one BLAS thread for numpy/scipy (the reference), set before they load; export
# OPENBLAS_NUM_THREADS to override. analysis.linalg.rrqr runs its torch work at rrqr.TORCH_THREADS itself.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.linalg import rrqr  # noqa: E402
from analysis.linalg.rrqr import kahan_test_matrix, reference_rrqr, strong_rrqr  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "rrqr_activations.npz"
N_ROWS = 5000                # the reference subsamples to 5000 rows
F = 1.5
# (θ, k, blocks) for 5000×128 Kahan matrices; plain QRCP violates ρ ≤ f at each (checked below).
# A plain Kahan matrix needs one swap; block-diagonal Kahan (blocks > 1) needs one per block.
KAHAN = [(1.2, 96, 1), (1.3, 64, 1), (1.4, 120, 1), (1.5, 32, 1), (1.0, 64, 4), (1.2, 96, 8), (0.9, 64, 16)]


def _bundled_model_activations(name: str = "deltanet-small") -> list[tuple[str, np.ndarray]]:
    """Per-head [A_q; A_k] calibration matrices of the bundled trained model (5000 × dk), if it exists."""
    from analysis.models import load as models
    if not any(s.name == name for s in models.list_samples()):
        return []
    from analysis.shrink.calibration import calibrate
    model = models.load_model(name, device="cpu")
    calib = calibrate(model, models.load_tokenizer(model), n_sequences=16, seq_len=256)
    return [(f"{name} layer {l} head {h}", calib.drrqr_matrix(l, h).float().numpy())
            for l in range(len(calib.layers)) for h in range(calib.layers[l].q_acts.shape[1])]


def load_real_activations() -> list[tuple[str, np.ndarray]]:
    """(label, M [n, d]) per head: from DATA if it exists, else synthetic SiLU activations.

    DATA holds arrays [n, d] (one head) or [heads, n, d], one per name (e.g. "layer3"); rows beyond
    5000 are subsampled (seeded) as the reference does.
    """
    rng = np.random.default_rng(0)
    real = _bundled_model_activations()
    if real:
        return real
    if DATA.exists():
        out = []
        with np.load(DATA) as z:
            for name in z.files:
                A = z[name]
                for h, M in enumerate(A if A.ndim == 3 else A[None]):
                    if M.shape[0] > N_ROWS:
                        M = M[rng.choice(M.shape[0], N_ROWS, replace=False)]
                    out.append((f"{name}/h{h}" if A.ndim == 3 else name, np.asarray(M, np.float32)))
        return out
    # silu(X W + b) with X ~ N(0, I) [5000, 256] and W [256, 64] of decaying spectrum: low-rank-ish
    # pre-activations, channel-dependent offsets and gains, float32 like real bf16 activations.
    out = []
    for h in range(8):
        X = rng.standard_normal((N_ROWS, 256))
        U, _ = np.linalg.qr(rng.standard_normal((256, 64)))
        V, _ = np.linalg.qr(rng.standard_normal((64, 64)))
        W = U @ np.diag(3.0 * np.exp(-np.arange(64) / 8.0)) @ V.T
        Z = X @ W + rng.normal(0.0, 0.5, 64)
        M = Z / (1.0 + np.exp(-Z)) * np.exp(rng.normal(0.0, 0.5, 64))
        out.append((f"synthetic (no real activations file) h{h}", M.astype(np.float32)))
    return out


def best_of_3(fn):
    times, res = [], None
    for _ in range(3):
        t = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t)
    return min(times), res


def thread_info() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:  # noqa: BLE001 - informational only
        blas = "?"
    env = {v: os.environ.get(v, "unset") for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    return (f"threads: ours torch={rrqr.TORCH_THREADS or torch.get_num_threads()} (MKL) + scipy d×d QRCP; "
            f"reference numpy/scipy BLAS={blas}; process torch.get_num_threads()={torch.get_num_threads()}; "
            f"cpus={os.cpu_count()}; " + ", ".join(f"{k}={v}" for k, v in env.items()))


def main() -> None:
    cases = [("real-like", label, M, M.shape[1] // 2) for label, M in load_real_activations()]
    cases += [("kahan", f"kahan θ={t}" + (f" ×{b} blocks" if b > 1 else "") + " (5000×128)",
               kahan_test_matrix(N_ROWS, 128, t, seed=i, blocks=b), k) for i, (t, k, b) in enumerate(KAHAN)]
    print(thread_info())
    warm = np.random.default_rng(1).standard_normal((500, 32))
    strong_rrqr(warm, 16), reference_rrqr(warm, 16)  # first-call overheads out of the timings

    head = f"{'case':<46} {'d':>4} {'k':>4} {'method':<9} {'time (s)':>9} {'swaps':>5} " \
           f"{'QRCP ρ':>9} {'max ρ':>8} {'σmin(kept)':>11} {'ρ≤f':>4} {'same kept':>9}"
    print(head)
    print("-" * len(head))
    total = {(g, m): 0.0 for g in ("real-like", "kahan") for m in ("ours", "reference")}
    ok_ours, qrcp_fails = True, True
    for group, label, M, k in cases:
        t_o, o = best_of_3(lambda: strong_rrqr(M, k, F))
        t_r, r = best_of_3(lambda: reference_rrqr(M, k, F))
        total[group, "ours"] += t_o
        total[group, "reference"] += t_r
        ok_ours &= o.max_rho <= F
        if group == "kahan":
            qrcp_fails &= min(o.rho_qrcp, r.rho_qrcp) > F
        same = set(o.kept.tolist()) == set(r.kept.tolist())
        for name, t, x, s in (("ours", t_o, o, ""), ("reference", t_r, r, "yes" if same else "no")):
            print(f"{label:<46} {M.shape[1]:>4} {k:>4} {name:<9} {t:>9.4f} {x.swaps:>5} {x.rho_qrcp:>9.3g} "
                  f"{x.max_rho:>8.4f} {x.sigma_min_kept:>11.4e} {'yes' if x.max_rho <= F else 'NO':>4} {s:>9}")
    for g in ("real-like", "kahan"):
        n_g = sum(c[0] == g for c in cases)
        print(f"{g:>9} ({n_g} cases): ours {total[g, 'ours']:.4f} s, reference {total[g, 'reference']:.4f} s, "
              f"speed-up {total[g, 'reference'] / total[g, 'ours']:.2f}x")
    ours = sum(v for (_, m), v in total.items() if m == "ours")
    ref = sum(v for (_, m), v in total.items() if m == "reference")
    print(f"kahan cases: plain QRCP violates ρ ≤ f for both methods: {'yes' if qrcp_fails else 'NO'}")
    print(f"max ρ ≤ f={F} on every case for ours: {'yes' if ok_ours else 'NO'}")
    print(f"total time: ours {ours:.4f} s, reference {ref:.4f} s ({len(cases)} cases)")
    print(f"speedup_vs_reference: {ref / ours:.2f}")


if __name__ == "__main__":
    main()
