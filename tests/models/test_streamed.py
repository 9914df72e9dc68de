"""Issue 30: a model over its memory budget is read one block at a time and gives the numbers of the model held whole.

Per family and per covered model type (tests/family_cases, their siblings Qwen3-Next, Qwen3.5-MoE, OLMo-hybrid and
the Mamba-2 types besides Nemotron-H; made deeper so the model is several times its budget, saved in shards), and per
bundled sample (as shipped: one file, a budget of 80 % of its weights): the rank
metrics and final states, every usable strategy's channel scores and kept sets (the gradient strategy through the
streamed gradient pass), perplexity (rel ≤ 1e-5), and a pruned checkpoint whose tensors are byte for byte those of
an in-memory prune, written in shards no larger than the input's; where the family removes heads, a head-pruned
checkpoint too. States and scores are computed by the same
operations on the same inputs in the same process, so they agree to float32 rounding (tolerance 1e-6 relative;
only the perplexity's logits are cut in chunks of tokens, hence its 1e-5).
"""
from __future__ import annotations

import importlib
import json

import pytest
import torch
from safetensors import safe_open

from analysis.errors import AnalysisError
from analysis.models import budget, limits, load as models
from analysis.models.stream.model import StreamedModel
from family_cases import CASE_MODULES
from family_cases.deeper import deeper_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHARD = "300KB"       # the input's shards (save_pretrained's max_shard_size)
FRACTION = 0.8        # the budget, as a fraction of the model's weights
CALIB = (2, 16)       # calibration sequences × tokens (at least every family case's key dim in all)


class CharTokenizer:
    """Text → ids within a tiny model's vocabulary (one id per character), for perplexity on any family case."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def __call__(self, text, **_):
        return {"input_ids": [ord(c) % self.vocab for c in text]}

    def decode(self, ids):
        return "".join(chr(97 + i % 26) for i in ids)

    def __len__(self):
        return self.vocab


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _needs(model, calib=CALIB) -> int:
    """The most any step below holds streamed (the memory checks' own estimates)."""
    return max(limits.forward_bytes(model, 2, 24), limits.calibration_bytes(model, *calib),
               limits.forward_bytes(model, 4, 16, states=False))


def _other_type(module: str, kind: str):
    """A covered model type that is not its family's case: Qwen3-Next (MoE), Qwen3.5-MoE and OLMo-hybrid beside
    Qwen3.5; Mamba-2, Granite-4.0-H (MoE), Falcon-H1, Bamba and Zamba2 (a shared transformer) beside Nemotron-H."""
    cases = importlib.import_module(f"family_cases.{module}")
    return lambda: cases.make_sibling(kind) if module == "qwen3_5" else cases.make_model(kind)


OTHER_TYPES = {f"{module}:{kind}": _other_type(module, kind) for module, kinds in
               (("qwen3_5", ("qwen3_next", "qwen3_5_moe", "olmo_hybrid")),
                ("mamba2", ("mamba2", "granitemoehybrid", "falcon_h1", "bamba", "zamba2"))) for kind in kinds}
# the bundled samples whose weights exceed the work of the steps below (deltanet-recall's 2 MB do not: its family
# is the delta_net case)
SAMPLES = ["deltanet-small", "gated-deltanet-small", "granite-h-small", "qwen35-hybrid-small"]
# Calibration keeps every layer's q/k activations, which grow with depth as the weights do: where a layer's weights
# are small next to them (pure Mamba-2's tiny layers; Zamba2, whose hybrid layers each hold the shared transformer
# with every hybrid layer's adapters), one sequence of 16 tokens (the key dim) is what fits below the model's size.
# The samples' key dim is 64.
CALIB_OF = {"mamba2:mamba2": (1, 16), "mamba2:zamba2": (1, 16), **{f"sample:{name}": (2, 32) for name in SAMPLES}}


@pytest.fixture(scope="module", params=[*CASE_MODULES, *OTHER_TYPES, *(f"sample:{s}" for s in SAMPLES)])
def deep_dir(request, tmp_path_factory):
    """(folder, budget, calibration size): the family case (or another covered model type) deepened until FRACTION
    of its weights holds every step's work (4× to 32× as many layers: a block's work does not grow with depth),
    saved in shards; or a bundled sample as shipped, with FRACTION of its weights."""
    calib = CALIB_OF.get(request.param, CALIB)
    if request.param.startswith("sample:"):
        path = models.SAMPLES_DIR / request.param.removeprefix("sample:")
        size = int(weight_bytes(models.load_model(str(path), device="cpu")) * FRACTION)
        with budget.budget_scope(size):
            assert _needs(models.load_model(str(path), device="cpu"), calib) <= size
        return path, size, calib
    if request.param in OTHER_TYPES:
        base = OTHER_TYPES[request.param]()
    else:
        base = importlib.import_module(f"family_cases.{request.param}").CASE.make_model()
    for times in (4, 8, 16, 32):
        path = tmp_path_factory.mktemp(f"deep-{request.param}-{times}")
        deeper_model(base, times).save_pretrained(path, max_shard_size=SHARD)
        size = int(weight_bytes(models.load_model(str(path), device="cpu")) * FRACTION)
        with budget.budget_scope(size):
            if _needs(models.load_model(str(path), device="cpu"), calib) <= size:
                break
    else:
        pytest.fail(f"{request.param}: even 32× deeper, {FRACTION:.0%} of its weights does not hold the work")
    assert (path / "model.safetensors.index.json").exists()
    return path, size, calib


def _tensors(folder) -> dict:
    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, "pt") as fh:
            out.update({k: fh.get_tensor(k) for k in fh.keys()})
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def _everything(model, ids, calib_ids, text, out, skip=()):
    """What the commands compute, on one model: states, importance, perplexity, an l1 prune with per-layer ratios
    (its logits, and saved in `out`) and, where the family removes heads, a saved head prune of half the heads,
    random (in `out`-heads)."""
    from analysis.evaluate.perplexity import perplexity
    from analysis.inspect.states import collect_states
    from analysis.shrink.calibration import calibrate
    from analysis.shrink.importance import importance_report
    from analysis.archs import adapter_for
    from analysis.shrink.heads.prune import HeadPlan, plan_head_counts, prune_with_heads
    from analysis.shrink.prune import prune, usable_strategies
    from analysis.models.key_plan import key_dims, plan_key_dims
    from analysis.io.model_dir import save_model
    trace = collect_states(model, ids, stride=4, keep_states=False)
    finals = collect_states(model, ids, positions=[ids.shape[1] - 1], compute_metrics=False, keep_states=True)
    calib = calibrate(model, None, input_ids=calib_ids, label="given ids")
    names = [n for n in usable_strategies(model)[0] if n not in skip]
    report = importance_report(model, None, names, 0.5, calib=calib)
    ppl = perplexity(model, CharTokenizer(model.config.vocab_size), text=text, context=16, batch=4)
    ratios = [0.25 if i % 2 else 0.5 for i in range(len(key_dims(model)))]  # per layer: the registered pruned types
    pruned = prune(model, "l1", plan_key_dims(model, ratios=ratios)).model
    with torch.no_grad():
        pruned_logits = pruned(ids[:1, :12], use_cache=False).logits  # the pruned view runs (its real buffers too)
    save_model(pruned, out)
    if adapter_for(model).head_refusal is None:
        plan = HeadPlan("random", tuple(plan_head_counts(model, ratio=0.5)))
        save_model(prune_with_heads(model, None, key_dims(model), plan).model, out.with_name(out.name + "-heads"))
    return trace, finals, report, ppl, pruned_logits


def test_a_streamed_model_gives_the_numbers_of_the_model_held_whole(deep_dir, tmp_path):
    deep_dir, size, calib = deep_dir
    whole = models.load_model(str(deep_dir), device="cpu")
    gen = torch.Generator().manual_seed(0)
    vocab = whole.config.vocab_size
    ids = torch.randint(1, vocab, (2, 24), generator=gen)
    calib_ids = torch.randint(1, vocab, calib, generator=gen)
    text = "the quick brown fox jumps over the lazy dog; " * 6
    with budget.budget_scope(size):  # below the model's size
        streamed = models.load_model(str(deep_dir), device="cpu")
    assert isinstance(streamed, StreamedModel) and streamed.analysis_streaming.startswith(
        f"streaming: one block at a time ({streamed.blocks} blocks")
    # RWKV-7's layers hand v_first on to each other: its streamed gradient pass is refused in one sentence
    skip = ("grad",) if streamed.shape.carried else ()
    want = _everything(whole, ids, calib_ids, text, tmp_path / "whole", skip)
    with budget.budget_scope(size):
        got = _everything(streamed, ids, calib_ids, text, tmp_path / "streamed", skip)
        if skip:
            from analysis.shrink.calibration import calibrate
            with pytest.raises(AnalysisError, match="hand a second tensor on to each other"):
                calibrate(streamed, None, input_ids=calib_ids, label="given ids").gradients()

    (trace_w, finals_w, report_w, ppl_w, logits_w), (trace_s, finals_s, report_s, ppl_s, logits_s) = want, got
    assert _rel(logits_s, logits_w) <= 1e-5  # the pruned models; only the logits are cut in chunks of tokens
    for a, b in zip(trace_s.layers, trace_w.layers):
        assert a.metrics.keys() == b.metrics.keys()
        for name in a.metrics:
            assert _rel(a.metrics[name].nan_to_num(), b.metrics[name].nan_to_num()) <= 1e-6, name
    for a, b in zip(finals_s.layers, finals_w.layers):
        assert _rel(a.states, b.states) <= 1e-6
    assert report_s["strategies"] == report_w["strategies"] and report_s["kept"] == report_w["kept"]
    for name, layers in report_w["scores"].items():
        for a, b in zip(report_s["scores"][name], layers):
            assert _rel(torch.tensor(a), torch.tensor(b)) <= 1e-5, name
    assert abs(ppl_s["perplexity"] / ppl_w["perplexity"] - 1) <= 1e-5 and ppl_s["tokens"] == ppl_w["tokens"]

    for kind in ("", "-heads") if (tmp_path / "whole-heads").exists() else ("",):
        pruned_w, pruned_s = _tensors(tmp_path / f"whole{kind}"), _tensors(tmp_path / f"streamed{kind}")
        assert pruned_s.keys() == pruned_w.keys()
        for name, tensor in pruned_w.items():  # byte for byte
            assert pruned_s[name].dtype == tensor.dtype and pruned_s[name].shape == tensor.shape
            assert torch.equal(pruned_s[name].view(-1).view(torch.uint8), tensor.view(-1).view(torch.uint8)), name
        config_w, config_s = (json.loads((tmp_path / f"{k}{kind}" / "config.json").read_text())
                              for k in ("whole", "streamed"))
        assert config_s == config_w
    shards = sorted((tmp_path / "streamed").glob("*.safetensors"))
    largest_input = max(p.stat().st_size for p in deep_dir.glob("*.safetensors"))
    if (deep_dir / "model.safetensors.index.json").exists():  # sharded like its input
        index = json.loads((tmp_path / "streamed" / "model.safetensors.index.json").read_text())
        assert len(shards) > 1 and set(index["weight_map"].values()) == {p.name for p in shards}
        assert all(p.stat().st_size <= largest_input for p in shards)
    else:  # a single file stays a single file
        assert [p.name for p in shards] == ["model.safetensors"]
        assert not (tmp_path / "streamed" / "model.safetensors.index.json").exists()
    reloaded = models.load_model(str(tmp_path / "streamed"), device="cpu")  # a whole model again
    assert not isinstance(reloaded, StreamedModel)
