"""Issue 23: the State lab's core against token-by-token loops written here from the definitions.

Tolerances (fp32 states, float64 oracles): states within 1e-4 of max(1, max|S|) (a few hundred fp32 updates of
unit keys; the same bound the project uses between its chunked and recurrent forms); retrieval errors within
1e-3 relative where the written value is not tiny. Nothing compares BLAS floats with ==.
"""
from __future__ import annotations

import importlib

import pytest
import torch

from analysis.inspect import state_lab as lab
from analysis.errors import AnalysisError
from analysis.inspect.states import collect_states
from analysis.shrink.head_channels import head_channels
from family_cases import CASE_MODULES

TOKENS = 70  # crosses one 64-token chunk of the model's own chunked recurrence
DELTA_KINDS = {"delta_rule", "gated_delta_rule", "per_channel_delta_rule"}   # the recurrences whose update is a delta rule (β, erase)


def delta_rule(x):
    return x.recurrence.name in DELTA_KINDS


def close(a, b, tol=1e-4):
    return float((a.double() - b.double()).abs().max()) <= tol * max(1.0, float(b.abs().max()))


def _keys(rule, x):
    """The keys a rule runs on: the delta comparison takes unit keys where the layer's are raw (no l2 norm)."""
    k = x.k.double()
    return k / torch.sqrt(k.square().sum(-1, keepdim=True) + 1e-6) if rule == "delta" and not x.unit_keys else k


def oracle_states(rule, x):
    """S_t from the definitions, float64: model (I − βkkᵀ) D S + βkvᵀ (or D S + kvᵀ, D = Diag(e^g) + b aᵀ for RWKV-7),
    delta without D, linear S + kvᵀ."""
    dk, dv = x.dims
    S = torch.zeros(dk, dv, dtype=torch.float64)
    out = []
    for t in range(x.tokens):
        k, v, b = _keys(rule, x)[t], x.v[t].double(), float(x.beta[t])
        if rule == "linear":
            S = S + torch.outer(k, v)
        else:
            if rule == "model" and x.g is not None:
                D = torch.diag(x.g[t].double().exp()) if x.g.dim() == 2 else torch.eye(dk) * float(x.g[t].exp())
                if x.a is not None:  # RWKV-7: (Diag(e^g) + b aᵀ) S_{t−1}
                    D = D.double() + torch.outer(x.b[t].double(), x.a[t].double())
                S = D.double() @ S
            if rule == "model" and not delta_rule(x):  # Mamba-2, GLA, RWKV-7: decay, then S += k vᵀ (no delta, no β)
                S = S + torch.outer(k, v)
            else:
                S = (torch.eye(dk, dtype=torch.float64) - b * torch.outer(k, k)) @ S + b * torch.outer(k, v)
        out.append(S.clone())
    return torch.stack(out)


def oracle_errors(rule, x, states):
    """‖S_tᵀk_j − w_j‖/‖w_j‖, w_j = β_j‖k_j‖²v_j (delta rules) or ‖k_j‖²v_j (linear), NaN for j > t."""
    T = x.tokens
    E = torch.full((T, T), float("nan"), dtype=torch.float64)
    for t in range(T):
        for j in range(t + 1):
            k, v = _keys(rule, x)[j], x.v[j].double()
            plain = rule == "linear" or (rule == "model" and not delta_rule(x))
            w = k.dot(k) * v * (1.0 if plain else float(x.beta[j]))
            E[t, j] = (states[t].T @ k - w).norm() / w.norm()
    return E


def case_model(name):
    try:
        return importlib.import_module(f"family_cases.{name}").CASE.make_model()
    except ModuleNotFoundError as exc:
        if exc.name == f"family_cases.{name}":
            pytest.skip(f"no family case {name}")
        raise


@pytest.mark.parametrize("family", [c for c in CASE_MODULES if c != "fla_hybrid"])
def test_lab_states_rules_and_retrieval_match_the_definitions(family):
    torch.manual_seed(0)
    model = case_model(family)
    ids = torch.randint(0, model.config.vocab_size, (TOKENS,))
    obs = lab.observe(model, ids)
    layer, head = obs.n_layers - 1, obs.heads(obs.n_layers - 1) - 1
    x = lab.head_inputs(obs, layer, head)
    traces = lab.trace_head(x)
    # the model's own rule equals the states the forward's chunked recurrence forms (analysis.inspect.states)
    ref = collect_states(model, ids[None], keep_states=True, compute_metrics=False).layers[layer].states[0, head]
    assert close(traces["model"].states, ref)
    for rule, tr in traces.items():
        want = oracle_states(rule, x)
        assert close(tr.states, want), rule
        E, W = tr.retrieval_error, oracle_errors(rule, x, want)
        assert torch.equal(E.isnan(), W.isnan()), rule
        ok = ~W.isnan()
        assert torch.allclose(E[ok].double(), W[ok], rtol=1e-3, atol=1e-4), rule
        m = min(x.dims)
        sv = torch.linalg.svdvals(want[-1])
        assert torch.allclose(tr.singular_values[-1].double(), sv[:m], rtol=1e-3, atol=1e-5 * float(sv[0]))
        assert tr.numerical_rank[-1] == float((sv > lab.TAU * sv[0]).sum())  # small ints, no BLAS rounding at stake
        p = sv[:m] / sv[:m].sum()   # the page's headline curve: exp of the entropy of the normalised singular values
        erank = torch.exp(-(p[p > 0] * p[p > 0].log()).sum())
        assert float(tr.effective_rank[-1]) == pytest.approx(float(erank), rel=1e-3), rule
    # keeping every key channel reproduces the head: k_raw, its key head and the re-normalisation are right
    kept_all = lab.pruned_inputs(x, torch.arange(x.dims[0]), "all channels kept")
    assert close(lab.run_rule("model", kept_all), traces["model"].states)
    assert lab.model_rule_is_delta(x) == (x.g is None)   # what the page's caption says
    if x.g is None:  # no gate: the model's own rule is the delta rule
        assert close(traces["model"].states, traces["delta"].states, 1e-6)
    # the page's explainer shows the rule the adapter declares: it must be the rule these inputs run
    from analysis.archs import adapter_for
    from analysis.archs.recurrence_words import words
    a = adapter_for(model)
    assert a.kernel_spec.recurrence is x.recurrence   # the routed op prepared inputs of the kind the adapter declares
    shown = words(a).update
    assert ("\\beta_t" in shown) == delta_rule(x) and ("Diag" in shown) == (x.g is not None and x.g.dim() == 2)
    assert ("b_t a_t^\\top" in shown) == (x.a is not None)


def test_synthetic_orthogonal_keys_are_read_back_exactly_by_every_rule():
    for rule, tr in lab.trace_head(lab.synthetic_inputs("orthogonal", 6, beta=1.0)).items():
        done = ~tr.retrieval_error.isnan()
        assert float(tr.retrieval_error[done].abs().max()) < 1e-6, rule
        assert tr.numerical_rank[-1] == 6


def test_synthetic_repeated_keys_overwrite_under_delta_and_interfere_under_linear():
    x = lab.synthetic_inputs("repeated", 6, beta=1.0)   # keys e0 e1 e2 e0 e1 e2, values one-hot e0..e5
    tr = lab.trace_head(x)
    last = {rule: t.retrieval_error[-1] for rule, t in tr.items()}
    assert torch.allclose(last["delta"][3:], torch.zeros(3), atol=1e-6)       # the new associations are exact
    assert torch.allclose(last["delta"][:3], torch.full((3,), 2 ** 0.5))      # the old ones are overwritten
    assert torch.allclose(last["linear"], torch.ones(6))                      # both, summed: error 1 for each
    assert tr["delta"].numerical_rank[-1] == 3 and tr["linear"].numerical_rank[-1] == 3


def test_synthetic_decay_fades_old_memories_under_the_model_rule_only():
    x = lab.synthetic_inputs("orthogonal", 4, beta=1.0, decay=0.5)
    tr = lab.trace_head(x)
    assert torch.allclose(tr["model"].retrieval_error[-1], torch.tensor([0.875, 0.75, 0.5, 0.0]), atol=1e-6)
    assert float(tr["delta"].retrieval_error[-1].abs().max()) < 1e-6


@pytest.fixture(scope="module")
def small():
    from analysis.models.load import load_model, load_tokenizer
    model = load_model("deltanet-small", "cpu", "float32")
    return model, load_tokenizer(model)


def test_bad_input_is_one_sentence(small):
    model, tok = small
    for text in ("", "   "):
        with pytest.raises(AnalysisError, match="empty"):
            lab.text_ids(tok, text)
    with pytest.raises(AnalysisError, match="more than the 512"):
        lab.text_ids(tok, "word " * 10_000)
    obs = lab.observe(model, lab.text_ids(tok, "The cat sat on the mat."))
    with pytest.raises(AnalysisError, match="Layer 9 does not exist"):
        lab.head_inputs(obs, 9, 0)
    with pytest.raises(AnalysisError, match="Head 4 does not exist"):
        lab.head_inputs(obs, 0, 4)
    with pytest.raises(AnalysisError, match="pruning ratio"):
        head_channels(model, "l1", 1.0, 0, 0)
    with pytest.raises(AnalysisError, match="needs calibration"):
        head_channels(model, "wanda", 0.5, 0, 0)


def test_pruning_keeps_the_state_at_ratio_zero_and_shrinks_dk(small):
    model, tok = small
    obs = lab.observe(model, lab.text_ids(tok, "A state lab reads a sentence one token at a time, and remembers."))
    x = lab.head_inputs(obs, 1, 2)
    same = lab.pruned_inputs(x, head_channels(model, "l1", 0.0, 1, lab.key_head_of(obs, 1, 2)), "all kept")
    assert close(lab.run_rule("model", same), lab.run_rule("model", x), 1e-5)
    half = lab.pruned_inputs(x, head_channels(model, "l1", 0.5, 1, lab.key_head_of(obs, 1, 2)), "half")
    assert half.dims == (32, x.dims[1])
    assert torch.allclose(half.k.norm(dim=-1), torch.ones(half.tokens), atol=1e-4)  # re-normalised, as the model does
    assert lab.trace_rule("model", half).singular_values.shape[-1] == 32


def test_noise_probe_matches_the_exact_raw_bound(small):
    model, tok = small
    obs = lab.observe(model, lab.text_ids(tok, "Noise on the query makes the readout of an old key wander."))
    x = lab.head_inputs(obs, 0, 0)
    S = lab.run_rule("model", x)[-1]
    p = lab.noise_probe(S, x.k[-2], 10.0, n_samples=2048)
    assert abs(p["at"]["mc_raw"] - p["at"]["bound_raw"]) <= 0.1 * p["at"]["bound_raw"]  # MC within 10 % (2048 draws)
    lower = lab.noise_probe(S, x.k[-2], 30.0)["at"]["mc_raw"]
    assert lower < p["at"]["mc_raw"]
    assert "valid" in lab.validity_label(p["at"]["second_valid"], p["second_valid_from_db"])


def test_a_projection_onto_basis_rows_equals_keeping_those_channels(small):
    model, tok = small
    obs = lab.observe(model, lab.text_ids(tok, "Rotations and index sets agree on basis vectors."))
    x = lab.head_inputs(obs, 0, 1)
    idx = torch.tensor([0, 5, 9, 33])
    by_index = lab.pruned_inputs(x, idx, "index")
    by_rotation = lab.pruned_inputs(x, torch.eye(x.dims[0])[idx], "rotation")
    assert close(lab.run_rule("model", by_rotation), lab.run_rule("model", by_index), 1e-6)


def test_lab_figures_mark_the_rank_the_token_and_label_log_axes_by_decade():
    from ui.state_lab import state_lab_figures as figs
    spec = figs.spectrum([4.0, 2.0, 1e-5, 0.0], 2, 1e-3, "t").to_plotly_json()
    assert spec["layout"]["yaxis"]["type"] == "log"
    rank = next(t for t in spec["data"] if t["name"] == "numerical rank 2")       # numerical rank 2, in the legend
    assert rank["x"] == [2.5, 2.5]
    assert spec["data"][0]["y"][3] is None                                       # a zero is a gap on a log axis
    curves = figs.over_tokens({"delta x": [0.1, 0.2]}, 1, ["a", " b"], "t", "y").to_plotly_json()
    assert curves["layout"]["shapes"][0]["x0"] == 1 and list(curves["data"][0]["text"]) == ["0: 'a'", "1: ' b'"]
    x = lab.synthetic_inputs("orthogonal", 4)
    p = lab.noise_probe(lab.run_rule("delta", x)[-1], x.k[0], 10.0, n_samples=16)
    noise = figs.noise_curves(p, 10.0, "t", "a", "b").to_plotly_json()
    assert noise["layout"]["yaxis"]["dtick"] == 1


def test_noisy_retrieval_error_against_the_written_value_is_exact():
    """E‖Sᵀ(k+ε) − w‖² = ‖Sᵀk − w‖² + σ²‖S‖_F²: checked by sampling (4096 draws, within 5 %)."""
    x = lab.synthetic_inputs("nearly parallel", 6, beta=0.7)
    tr = lab.trace_rule("delta", x)
    S, k, w = tr.states[-1].double(), x.k[2].double(), tr.written[2].double()
    p = lab.noise_probe(tr.states[-1], x.k[2], 6.0, n_samples=16, written=tr.written[2])
    sigma = float(k.norm()) * 10 ** (-6.0 / 20) / 6 ** 0.5
    eps = sigma * torch.randn(4096, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mc = ((((k + eps) @ S) - w).norm(dim=-1).square().mean().sqrt() / w.norm()).item()
    assert abs(p["at"]["retrieval_raw"] - mc) <= 0.05 * mc
    assert p["retrieval_raw"][-1] >= float(tr.retrieval_error[-1, 2]) - 1e-9  # noise only adds error
