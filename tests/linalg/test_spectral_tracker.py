"""The tracked s1² and ‖S‖_F² after every token against a float64 token loop with numpy's SVD."""
import numpy as np
import pytest

from analysis.linalg.spectral_tracker import DEFAULT_TOL, track_top_singular as _track_bthd


def track_top_singular(k, v, beta, decay, **kwargs):
    """The tracker on N sequences [N, T, ...] laid out as N heads of one batch [1, T, N, ...]."""
    out = _track_bthd(k.swapaxes(0, 1)[None], v.swapaxes(0, 1)[None], beta.T[None], decay.T[None], **kwargs)
    return tuple(x[0] for x in out)


def exact(k, v, beta, decay):
    """Token loop in float64: ‖S_t‖_F² and s1(S_t)² for every sequence and token."""
    N, T, dk = k.shape
    fro2, top2 = np.zeros((N, T)), np.zeros((N, T))
    for n in range(N):
        S = np.zeros((dk, v.shape[2]))
        for t in range(T):
            S = decay[n, t] * S
            S = S + beta[n, t] * np.outer(k[n, t], v[n, t] - S.T @ k[n, t])
            fro2[n, t] = np.square(S).sum()
            top2[n, t] = np.linalg.norm(S, 2) ** 2
    return fro2, top2


def random_inputs(n, t, dk, dv, seed, gated=False):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((n, t, dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)           # l2-normalised keys, as the kernels see them
    v = rng.standard_normal((n, t, dv)) * rng.uniform(0.2, 2.0, (n, 1, 1))
    beta = rng.uniform(0.05, 1.0, (n, t))
    decay = np.exp(-rng.exponential(0.2, (n, t))) if gated else np.ones((n, t))
    return k.astype(np.float32), v.astype(np.float32), beta.astype(np.float32), decay.astype(np.float32)


@pytest.mark.parametrize("dk,dv,gated", [(64, 64, False), (64, 64, True), (32, 64, True), (48, 16, False)])
def test_matches_svd_at_every_token(dk, dv, gated):
    inputs = random_inputs(5, 120, dk, dv, seed=dk + dv + gated, gated=gated)
    ref_fro2, ref_top2 = exact(*(x.astype(np.float64) for x in inputs))
    for tol in (DEFAULT_TOL, 1e-8):  # the default and a tight one; the state itself is float32, as in the reference
        fro2, top2, steps = track_top_singular(*inputs, tol=tol)
        assert np.allclose(fro2, ref_fro2, rtol=1e-5)
        rel = (ref_top2 - top2) / ref_top2
        assert rel.min() > -1e-5               # s1² is never over-estimated (beyond float32 rounding) …
        u, ref_u = fro2 / top2 / min(dk, dv), ref_fro2 / ref_top2 / min(dk, dv)
        assert np.abs(u - ref_u).max() < max(tol, 1e-6)  # … and u is as close as asked
        assert steps.min() >= 1 and steps.mean() < (3 if tol == DEFAULT_TOL else 8)


def test_crossing_top_singular_values_are_followed():
    """Two orthogonal keys written alternately with growing values: s1 and s2 swap every few tokens."""
    T, d = 60, 16
    k = np.zeros((1, T, d), np.float32)
    v = np.zeros((1, T, d), np.float32)
    for t in range(T):
        k[0, t, t % 2] = 1.0
        v[0, t, 2 + t % 2] = 1.0 + 0.05 * t + (0.3 if t % 4 < 2 else 0.0)
    beta = np.full((1, T), 0.5, np.float32)
    decay = np.full((1, T), 0.97, np.float32)
    _, top2, _ = track_top_singular(k, v, beta, decay)
    _, ref = exact(k.astype(float), v.astype(float), beta.astype(float), decay.astype(float))
    assert np.allclose(top2, ref, rtol=1e-6)


def test_zero_and_non_finite_sequences_stay_separate():
    k, v, beta, decay = random_inputs(3, 40, 16, 16, seed=1)
    k[0] = 0.0                                   # never writes: the state stays zero
    v[1, 20] = np.nan                            # poisons sequence 1 from token 20 on
    fro2, top2, _ = track_top_singular(k, v, beta, decay, threads=2)
    assert (fro2[0] == 0).all() and (top2[0] == 0).all()
    assert np.isfinite(top2[1, :20]).all() and np.isnan(top2[1, 20:]).all()
    ref_fro2, ref_top2 = exact(*(x[2:].astype(np.float64) for x in (k, v, beta, decay)))
    assert np.abs(fro2[2] / top2[2] - ref_fro2[0] / ref_top2[0]).max() / 16 < DEFAULT_TOL


def test_threads_do_not_change_results():
    inputs = random_inputs(7, 50, 32, 32, seed=3, gated=True)
    one = track_top_singular(*inputs, threads=1)
    two = track_top_singular(*inputs, threads=2)
    for a, b in zip(one, two):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", ["deltanet-small", "gated-deltanet-small"])
@pytest.mark.parametrize("random_init", [False, True], ids=["trained", "random_init"])
def test_sample_models_within_the_benchmark_target(name, random_init):
    """The bundled models (and their random-init twins, which the dashboard overlays: flatter spectra, more
    crossings) on real validation text, every layer, head and token, against an SVD of every state."""
    import torch
    from transformers import AutoModelForCausalLM

    from analysis.data import corpus as data
    from analysis.models import load as models
    from analysis.inspect.rank_trace import collect_utilization_trace
    from analysis.inspect.states import collect_states
    model = models.load_model(name, device="cpu")
    ids = data.token_windows(data.encode(data.load_text("validation"), models.load_tokenizer(model)), 256,
                             max_windows=2)
    if random_init:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(model.config).eval()
    dense = collect_utilization_trace(model, ids)
    exact = collect_states(model, ids, stride=1)
    for fast, layer in zip(dense, exact.layers):
        assert (fast["rank_utilization"] - layer.metrics["rank_utilization"]).abs().max() < 1e-4


def test_page_states_the_tolerance_in_use():
    """pages/states.py names the tolerance without importing numba; keep the two in step."""
    import re
    from pathlib import Path
    page = (Path(__file__).resolve().parents[2] / "pages" / "states.py").read_text()
    stated = re.search(r"estimated error of ([0-9.e-]+) in the utilization", page)
    assert stated and float(stated.group(1)) == DEFAULT_TOL
