"""Issue 41, item 1 for the transformers families: every config field of Qwen3.5 / Qwen3.5-MoE / Qwen3-Next /
OLMo-hybrid, Kimi Linear and the Mamba-2 hybrids (Mamba-2, Nemotron-H, Granite-H, Falcon-H1, Bamba, Zamba2) that
changes which modules or code paths run, covered pairwise (tests/family_cases/tf_flags.py; the table is in
docs/config-flags.md, "Config flags of the transformers families") on tiny random-init models, every parameter
awake.

Per case: the project's CPU path (its routed recurrences) equals transformers' own torch path run in a subprocess
with fla and the project hidden (tests/oracle/torch_path_run.py): the no-cache logits, the cached forward's logits
and every cache tensor (recurrent / SSM states, conv windows, keys and values), and a two-token cached decode, 1e-4
relative; the prune is pure channel removal (the original with the dropped q/k rows zeroed) and moves the logits
(≥ 1e-4 and ≥ 100× the removal error). Default lane: per model type the case farthest from the defaults; the
other cases are slow.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from family_cases import channels_zeroed, logits
from family_cases.tf_flags import (AXES, _valid, all_cases, case_id, config_fields, decoded, make_tf_model, pairwise,
                                   unawake, cache_tensors)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ORACLE = Path(__file__).resolve().parents[1] / "oracle" / "torch_path_run.py"
TOL = 1e-4
CASES = all_cases()


def _farthest(model_type: str) -> dict:
    cases, defaults = pairwise(model_type), {n: v[0] for n, v in AXES[model_type].items()}
    changed = [sum(c[n] != defaults[n] for n in c) for c in cases]
    return cases[changed.index(max(changed))]


FAST = {case_id(t, _farthest(t)) for t in AXES}
PARAMS = [pytest.param((t, c), id=case_id(t, c), marks=() if case_id(t, c) in FAST else pytest.mark.slow)
          for t, c in CASES]

_models: dict = {}


@pytest.fixture(scope="module", autouse=True)
def routed():
    from analysis.archs.install import ready
    ready()   # the routing, and `mamba2` given back to transformers before any case is built


def _model(model_type: str, case: dict):
    key = case_id(model_type, case)
    if key not in _models:
        _models[key] = make_tf_model(model_type, case)
    return _models[key]


def _ids(seed=3, batch=2, tokens=12):
    return torch.randint(1, 97, (batch, tokens), generator=torch.Generator().manual_seed(seed))


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def test_the_cases_cover_every_pair_of_flag_values():
    for model_type, axes in AXES.items():
        cases = pairwise(model_type)
        names = list(axes)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                for x in axes[a]:
                    for y in axes[b]:
                        if _valid(model_type, {a: x, b: y}):
                            assert any(c[a] == x and c[b] == y for c in cases), (model_type, a, x, b, y)
    ids = [case_id(t, c) for t, c in CASES]
    assert len(ids) == len(set(ids)) and len(FAST) == len(AXES)


@pytest.fixture(scope="module")
def oracle(request, tmp_path_factory):
    """transformers' torch path on every case this session runs, in one subprocess (fla and the project hidden)."""
    wanted = sorted({case_id(*item.callspec.params["tf_case"]) for item in request.session.items
                     if getattr(item, "callspec", None) and "tf_case" in item.callspec.params
                     and item.originalname == "test_cpu_path_equals_transformers_torch_path"})
    root = tmp_path_factory.mktemp("tf-oracle")
    torch.save(_ids(), root / "ids.pt")
    names = {}
    for i, (t, c) in enumerate((t, c) for t, c in CASES if case_id(t, c) in wanted):
        names[case_id(t, c)] = f"case{i:03d}"
        _model(t, c).save_pretrained(root / names[case_id(t, c)])
    run = subprocess.run([sys.executable, str(ORACLE), str(root), str(root / "oracle.pt")],
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    out = torch.load(root / "oracle.pt", weights_only=True)
    return {key: out[name] for key, name in names.items()}


@pytest.fixture(params=PARAMS)
def tf_case(request):
    return request.param


def test_cpu_path_equals_transformers_torch_path(tf_case, oracle):
    """Logits (no cache, cached, two decode steps) and every cache tensor after the full forward and after the
    decode, against transformers' torch path with fla hidden; the case's fields are in the config it ran."""
    model_type, case = tf_case
    model, want = _model(model_type, case), oracle[case_id(model_type, case)]
    assert not unawake(model), unawake(model)
    renamed = {"mamba": "linear_attention", "attention": "full_attention"}   # Granite-H's config renames them
    for key, value in config_fields(model_type, case).items():
        value, got = (list(v) if isinstance(v, tuple) else v for v in (value, getattr(model.config, key)))
        assert got == value or key == "layer_types" and got == [renamed[v] for v in value], key
    assert "modeling_" + model_type.removesuffix("_text") in want["module"]   # transformers' class, not fla's
    from analysis.models.load import linear_layers
    from analysis.runtime.backend import observe_recurrences
    ids, seen = _ids(), []
    with observe_recurrences(seen.append):     # the project's routed recurrence ran, once per linear layer
        ours = logits(model, ids)
    assert len(seen) == len(linear_layers(model)) > 0
    assert _rel(ours, want["logits"]) < TOL
    full, steps, cache = decoded(model, ids, ids.shape[1] - 2)
    assert _rel(full.logits, want["cached_logits"]) < TOL
    assert _rel(steps, want["decode_logits"]) < TOL
    _assert_traced_states_are_transformers_states(model, ids, want["states"])
    for label, got, expected in (("states", cache_tensors(full.past_key_values), want["states"]),
                                 ("decode_states", cache_tensors(cache), want["decode_states"])):
        assert got.keys() == expected.keys(), (label, sorted(got), sorted(expected))
        assert any("recurrent" in k or "ssm" in k for k in got), sorted(got)
        for key in got:
            assert _rel(got[key], expected[key]) < TOL, (label, key)


def _assert_traced_states_are_transformers_states(model, ids, cache: dict):
    """The states the project shows (collect_states, K-first [dk, dv] per head) after the last token equal the
    recurrent / SSM state transformers' torch path leaves in its cache, layer by layer (Mamba-2 keeps [head_dim, N]:
    transposed)."""
    import re

    from analysis.archs import adapter_for
    from analysis.inspect.states import collect_states
    trace = collect_states(model, ids, keep_states=True, compute_metrics=False)
    layer_of = lambda k: int(re.search(r"layers\[(\d+)\]", k).group(1))   # noqa: E731
    final = [cache[k] for k in sorted((k for k in cache if "recurrent_states" in k), key=layer_of)]
    assert len(final) == len(trace.layers) > 0
    transposed = adapter_for(model).family == "mamba2"
    for i, (layer, want) in enumerate(zip(trace.layers, final)):
        got = layer.states[:, :, -1]                                   # [B, H, dk, dv] after the last token
        assert _rel(got.transpose(-1, -2) if transposed else got, want) < TOL, f"traced state of linear layer {i}"


def test_the_prune_is_pure_removal_and_moves_the_logits(tf_case):
    """A random half / quarter of every linear layer's key channels removed (per-layer ratios): the pruned model's
    logits equal the original's with those q/k rows zeroed (projection rows and conv weights and biases: zero after
    the convolution), and differ from the original's by ≥ 1e-4 and ≥ 100× that error."""
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.prune import prune
    model_type, case = tf_case
    model = _model(model_type, case)
    n = len(plan_key_dims(model, ratio=0.0))
    result = prune(model, "random", plan_key_dims(model, ratios=[(0.5, 0.25)[i % 2] for i in range(n)]), seed=3)
    ids = _ids(seed=1)
    zeroed_logits = logits(channels_zeroed(model, result.selections), ids)
    pruned_logits, original = logits(result.model, ids), logits(model, ids)
    error = float((pruned_logits - zeroed_logits).abs().max())
    moved = float((pruned_logits - original).abs().max())
    assert error <= TOL * max(1.0, float(original.abs().max())), error
    assert moved >= TOL and moved >= 100 * error, (moved, error)


# --- refused flags ----------------------------------------------------------------------------------------------

REFUSED = [(t, {"linear_num_key_heads": 4, "linear_num_value_heads": 6}, "linear_num_value_heads")
           for t in ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "olmo_hybrid")] + \
          [(t, {key: 3}, key) for t, key in (("mamba2", "n_groups"), ("nemotron_h", "n_groups"),
                                            ("granitemoehybrid", "mamba_n_groups"), ("falcon_h1", "mamba_n_groups"),
                                            ("bamba", "mamba_n_groups"), ("zamba2", "mamba_ngroups"))]


@pytest.mark.parametrize("model_type, fields, flag", REFUSED, ids=[f"{t}-{k}" for t, _, k in REFUSED])
def test_a_flag_combination_no_forward_can_run_is_one_sentence_before_loading(tmp_path, capsys, model_type, fields,
                                                                               flag):
    """Heads the key heads / groups do not divide (transformers' own torch path cannot run them either): a folder
    holding only config.json (no weights: refused before loading) is one sentence naming the field, exit 2."""
    import json

    from transformers import AutoConfig

    from analysis.cli.main import main
    from family_cases.tf_flags import BASE
    config = AutoConfig.for_model(model_type, **BASE[model_type]).to_dict()
    folder = tmp_path / f"{model_type}-refused"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config, **fields}))
    assert main(["rank", str(folder), "--device", "cpu", "--tokens", "16", "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert f"sets {flag} to " in err and str(folder / "config.json") in err, err
    assert err.count(". ") == 0 and err.endswith("."), err


# --- the CLI on the flag cases ------------------------------------------------------------------------------------

CLI = [pytest.param(t, _farthest(t), id=case_id(t, _farthest(t)),
                    marks=() if t == "qwen3_5_text" else pytest.mark.slow) for t in AXES]


@pytest.mark.parametrize("model_type, case", CLI)
def test_rank_prune_ppl_exit_0_on_the_flag_cases(tmp_path, capsys, model_type, case):
    """Per model type the case farthest from the defaults, saved with the project's tokenizer's vocabulary:
    `rank`, `prune` and `ppl` exit 0 without a traceback."""
    import copy

    from analysis.cli.main import main
    from analysis.data import corpus as data
    model = copy.deepcopy(_model(model_type, case))
    model.resize_token_embeddings(len(data.load_tokenizer()), mean_resizing=False)
    model.save_pretrained(tmp_path / "model")
    for argv in (["rank", "--tokens", "16", "--batch", "1"],
                 ["prune", "--strategy", "l1", "--ratio", "0.5", "--eval-tokens", "260", "--out", str(tmp_path / "p")],
                 ["ppl", "--context", "32", "--max-tokens", "64"]):
        code = main([argv[0], str(tmp_path / "model"), "--device", "cpu", *argv[1:]])
        err = capsys.readouterr().err
        assert code == 0, (argv[0], err[-2000:])
        assert "Traceback" not in err
