"""Issue 41, item 1: every fla config field that changes which modules or kernels run, covered pairwise
(tests/family_cases/flags.py; the table is docs/config-flags.md), on tiny random-init models with every parameter awake.

Per case (fast): the CPU path runs short (≤ 64 tokens: fla's fused_recurrent) and long (> 64: the config's attn_mode)
sequences and the loss of a forward with labels equals torch's cross-entropy of its logits; the prune is pure channel
removal and moves the logits (≥ 1e-4 and ≥ 100× the removal error); the model read one block at a time gives the
logits of the model held whole. Slow: the CPU path equals fla's real Triton kernels run under TRITON_INTERPRET=1
(logits and every recurrent state, full forward and cached decode, 1e-4 relative), one subprocess per family.
A refused flag is one sentence naming it, before loading; `rank`, `prune` and `ppl` on every
case are tests/archs/test_config_flags_cli.py.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from family_cases import channels_zeroed, decoded, logits, post_conv_qk
from family_cases.flags import AXES, all_cases, case_id, config_fields, make_flag_model, pairwise, unawake

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = all_cases()
IDS = [case_id(f, c) for f, c in CASES]
ORACLE = Path(__file__).resolve().parents[1] / "oracle" / "interpret_run.py"
TOL = 1e-4

_models: dict = {}


def _model(family: str, case: dict):
    key = case_id(family, case)
    if key not in _models:
        _models[key] = make_flag_model(family, case)
    return _models[key]


@pytest.fixture(params=CASES, ids=IDS)
def flag_case(request):
    family, case = request.param
    return family, case, _model(family, case)


def _ids(model, batch=2, tokens=20, seed=0):
    return torch.randint(1, model.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(seed))


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def test_the_cases_cover_every_pair_of_flag_values():
    """All pairs: for any two fields of a family, every pair of their values is in some case (except pairs fla
    cannot build), and the cases differ from the family's defaults in every field somewhere."""
    from family_cases.flags import _valid
    for family, axes in AXES.items():
        cases = pairwise(family)
        for (a, xs), (b, ys) in [(p, q) for i, p in enumerate(axes.items()) for q in list(axes.items())[i + 1:]]:
            for x in xs:
                for y in ys:
                    if _valid(family, {a: x, b: y}):
                        assert any(c[a] == x and c[b] == y for c in cases), (family, a, x, b, y)
    assert len(CASES) == len(set(IDS))


def test_the_cpu_path_runs_every_flag(flag_case):
    """Awake, short and long sequences (the config's attn_mode beyond 64 tokens), finite logits; the loss with labels
    (fused, fused with the output head, or torch's, as the config says) is cross-entropy of the next token."""
    family, case, model = flag_case
    assert not unawake(model)
    for key, value in config_fields(family, case).items():   # fla fills in the attn spec's other fields
        got = getattr(model.config, key)
        assert ({k: got[k] for k in value} if isinstance(value, dict) else got) == value, key
    for tokens in (20, 72):
        ids = _ids(model, batch=1, tokens=tokens)
        out = logits(model, ids)
        assert out.shape == (1, tokens, model.config.vocab_size) and torch.isfinite(out).all()
    with torch.no_grad():
        loss = model(ids, labels=ids, use_cache=False).loss
    want = torch.nn.functional.cross_entropy(out[0, :-1].double(), ids[0, 1:])
    assert abs(float(loss) - float(want)) <= 1e-5 * float(want)


@contextlib.contextmanager
def _masked_activations(model, selections):
    """Where a q/k activation is not 0 at 0 (DeltaNet's qk_activation 'elu': 1 + elu; GLA's feature_map 'sigmoid':
    ½), a zeroed row still feeds its channel, so the removal reference multiplies that activation's output by the
    kept mask: the channel is zero where channels first meet (the sum norm, the l2 norm, the recurrence)."""
    import fla.layers.delta_net as delta_net_file

    from analysis.models.load import linear_layers
    restore, current = [], {}
    for layer, sel in zip(linear_layers(model), selections):
        mod = layer.module
        keep = torch.zeros(layer.key_heads, layer.key_dim).scatter_(1, sel.indices, 1.0)
        if getattr(mod, "feature_map_fn", None) is not None:
            restore.append((mod, "feature_map_fn", mod.feature_map_fn))
            mod.feature_map_fn = lambda x, f=mod.feature_map_fn, m=keep: f(x) * m.to(x.dtype)
        if getattr(mod, "qk_activation", None) == "elu":
            restore.append(mod.register_forward_pre_hook(lambda _m, _a, m=keep: current.__setitem__("keep", m)))
    original = delta_net_file.elu_p1
    delta_net_file.elu_p1 = lambda x: original(x) * current["keep"].to(x.dtype) if "keep" in current else original(x)
    try:
        yield
    finally:
        delta_net_file.elu_p1 = original
        for item in restore:
            item.remove() if hasattr(item, "remove") else setattr(*item)


def test_the_prune_is_pure_removal_and_moves_the_logits(flag_case):
    """A random half of every layer's key channels removed (per-layer ratios): the pruned model's logits equal the
    original's with those channels zero where the recurrence reads them, and differ from the original's."""
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.prune import prune
    family, case, model = flag_case
    n = len(plan_key_dims(model, ratio=0.0))
    result = prune(model, "random", plan_key_dims(model, ratios=[(0.5, 0.25)[i % 2] for i in range(n)]), seed=3)
    ids = _ids(model, seed=1)
    zeroed = channels_zeroed(model, result.selections)
    with _masked_activations(zeroed, result.selections):
        for sel, (q, k) in zip(result.selections, post_conv_qk(zeroed, ids)):
            kept = torch.zeros(q.shape[-2:], dtype=torch.bool).scatter_(1, sel.indices, True)
            assert q[..., ~kept].abs().max() == 0 and k[..., ~kept].abs().max() == 0
        zeroed_logits = logits(zeroed, ids)
    pruned_logits, original = logits(result.model, ids), logits(model, ids)
    error = float((pruned_logits - zeroed_logits).abs().max())
    moved = float((pruned_logits - original).abs().max())
    assert error <= TOL, error
    assert moved >= TOL and moved >= 100 * error, (moved, error)


def test_streamed_equals_whole(flag_case, tmp_path):
    """The saved case read one block at a time (a budget below its weights) gives the logits of the model held whole."""
    from analysis.models import budget, load as models
    from analysis.models.stream.model import StreamedModel
    family, case, model = flag_case
    model.save_pretrained(tmp_path)
    whole = models.load_model(str(tmp_path), device="cpu")
    ids = _ids(model, batch=1, tokens=16)
    weights = sum(p.numel() * p.element_size() for p in whole.parameters())
    with budget.budget_scope(int(weights * 0.8)):
        streamed = models.load_model(str(tmp_path), device="cpu")
        assert isinstance(streamed, StreamedModel)
        got = streamed(ids).logits
    want = logits(whole, ids)
    assert _rel(got, want) <= 1e-5
    assert torch.equal(want, logits(model, ids))     # what was saved is what loads


# --- refused flags ----------------------------------------------------------------------------------------------

def _config_dir(tmp_path, family: str, **fields) -> Path:
    """A folder whose config.json is the family's case config with `fields` set (no weights: refused before)."""
    import importlib
    maker = importlib.import_module(f"family_cases.{family}")
    sizes = getattr(maker, "SIZES", {"hidden_size": 64, "num_hidden_layers": 2, "num_heads": 2, "head_dim": 32,
                                     "vocab_size": 256})
    from transformers import AutoConfig
    model_type = {"delta_net": "delta_net", "gated_deltanet": "gated_deltanet", "kda": "kda", "gla": "gla",
                  "rwkv7": "rwkv7"}[family]
    config = {**AutoConfig.for_model(model_type, **sizes).to_dict(), **fields}
    folder = tmp_path / f"{family}-refused"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


REFUSED = [
    ("delta_net", {"attnres_block_size": 1}, "attnres_block_size"),
    ("gated_deltanet", {"attnres_block_size": 2}, "attnres_block_size"),
    ("kda", {"attnres_block_size": 1}, "attnres_block_size"),
    ("gla", {"attnres_block_size": 2}, "attnres_block_size"),
    ("gla", {"attn_mode": "fused_chunk"}, "attn_mode"),
    ("delta_net", {"attn_mode": "fused_chunk"}, "attn_mode"),
    ("gla", {"num_kv_heads": 1}, "num_kv_heads"),
    ("rwkv7", {"attn": {"layers": [1], "num_heads": 2}}, "attn"),
    ("rwkv7", {"value_dim": [128, 128]}, "value_dim"),
]


@pytest.mark.parametrize("family, fields, flag", REFUSED, ids=[f"{f}-{k}" for f, _, k in REFUSED])
def test_a_flag_the_tool_cannot_run_is_one_sentence_before_loading(tmp_path, capsys, family, fields, flag):
    from analysis.cli.main import main
    folder = _config_dir(tmp_path, family, **fields)
    assert main(["rank", str(folder), "--device", "cpu", "--tokens", "16", "--batch", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert f"sets {flag} " in err and str(folder / "config.json") in err, err
    assert err.count(". ") == 0 and err.endswith("."), err


# --- fla's real kernels (slow) ------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("family", list(AXES))
def test_every_flag_case_matches_fla_kernels(tmp_path, family):
    """Every case of the family saved, run by fla's own Triton kernels under TRITON_INTERPRET=1 in one subprocess
    that never imports `analysis`: logits and every recurrent state within 1e-4 relative of the CPU path, for the
    full forward (12 tokens) and a two-token cached decode after it."""
    cases = pairwise(family)
    ids = torch.randint(1, 256, (1, 12), generator=torch.Generator().manual_seed(3))
    torch.save(ids, tmp_path / "ids.pt")
    for i, case in enumerate(cases):
        _model(family, case).save_pretrained(tmp_path / f"case{i:02d}")
    start = time.perf_counter()
    run = subprocess.run([sys.executable, str(ORACLE), "--many", str(tmp_path), str(tmp_path / "oracle.pt")],
                         capture_output=True, text=True, timeout=3000)
    assert run.returncode == 0, run.stderr[-3000:]
    oracle = torch.load(tmp_path / "oracle.pt", weights_only=True)
    print(f"\n{family}: {len(cases)} cases interpreted in {time.perf_counter() - start:.0f} s")
    for i, case in enumerate(cases):
        want, name = oracle[f"case{i:02d}"], case_id(family, case)
        full, steps, cache = decoded(_model(family, case), ids, ids.shape[1] - 2)
        assert _rel(full.logits, want["logits"]) < TOL, name
        assert _rel(steps, want["decode_logits"]) < TOL, name
        for layer, (s, d) in enumerate(zip(want["states"], want["decode_states"])):
            if s is None:      # a softmax block
                continue
            assert _rel(full.past_key_values[layer]["recurrent_state"], s) < TOL, (name, layer)
            assert _rel(cache[layer]["recurrent_state"], d) < TOL, (name, layer)


@pytest.mark.parametrize("family", list(AXES))
def test_the_fused_losses_give_torch_s_gradients(family):
    """fuse_cross_entropy / fuse_linear_cross_entropy (the loss the gradient strategy and recovery differentiate)
    give the gradients of torch's cross-entropy of the logits on the CPU path (use_l2warp off: it adds its own)."""
    model = make_flag_model(family, {})
    model.config.use_l2warp = False
    ids = _ids(model, batch=1, tokens=20)
    grads = {}
    for loss in ("fused", "fused_linear", "torch"):
        for key, value in {"fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
                           **config_fields(family, {"loss": loss})}.items():
            setattr(model.config, key, value)
        model.zero_grad()
        model(ids, labels=ids, use_cache=False).loss.backward()
        grads[loss] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    for loss in ("fused", "fused_linear"):
        assert grads[loss].keys() == grads["torch"].keys()
        for name, grad in grads["torch"].items():
            assert _rel(grads[loss][name], grad) <= 1e-5, (loss, name)
