"""The Model page's implementation line (analysis.archs.implementation) tells the truth: the CPU op it names is the
one a forward calls (counted on the recurrences' chunked ops, analysis.runtime.recurrences), and the CUDA op is what
the routed entry point binds."""
import importlib.util

import pytest
import torch

from analysis.runtime.recurrences import RECURRENCES
from analysis.archs.implementation import implementation
from family_cases.text_lm import build_tiny
from family_cases.mamba2 import make_model as make_mamba2


def _calls(monkeypatch, model) -> dict:
    """Which of the project's two chunked CPU ops a forward of `model` calls, and how often."""
    counts = {"chunked_delta_rule": 0, "chunked_linear_attention": 0}
    owners = {next(c for c in type(r).__mro__ if "chunked_op" in c.__dict__) for r in RECURRENCES.values()}
    for owner in owners:   # the classes that define an op (the gated kinds inherit the delta rule's)
        original = owner.__dict__["chunked_op"].__func__
        if original.__name__ not in counts:
            continue

        def counted(*args, _original=original, **kwargs):
            counts[_original.__name__] += 1
            return _original(*args, **kwargs)
        monkeypatch.setattr(owner, "chunked_op", staticmethod(counted))
    with torch.no_grad():
        model(torch.randint(1, 90, (1, 12)))
    return counts


@pytest.mark.parametrize("model_type", ["nemotron_h", "granitemoehybrid"])
def test_mamba2_line_names_the_linear_attention_op_and_the_cuda_binding(monkeypatch, model_type):
    model = make_mamba2(model_type)
    impl = implementation(model)
    assert impl.layers == 3 - (model_type == "nemotron_h") and impl.device == "cpu"
    assert "`chunked_linear_attention` (analysis/runtime/cpu_ops/linear_attention.py" in impl.cpu
    assert _calls(monkeypatch, model) == {"chunked_delta_rule": 0, "chunked_linear_attention": impl.layers}
    modeling = f"transformers.models.{model_type}.modeling_{model_type}"
    if importlib.util.find_spec("mamba_ssm") is None:   # transformers bound its own torch SSD at import
        assert impl.cuda == f"transformers' own pure-torch `mamba2_chunk_scan` ({modeling}), as mamba_ssm is not installed"
    else:
        assert "mamba_ssm's CUDA kernel `mamba_chunk_scan_combined`" in impl.cuda
    assert impl.loaded_as.startswith("transformers' `") and modeling in impl.loaded_as
    [loaded, runs] = impl.lines()
    assert "Mamba-2 SSD scan" in runs and "(what runs here: this model is on the CPU)" in runs


def test_fla_line_names_the_delta_rule_op_and_fla_kernels(monkeypatch):
    model = build_tiny("gated_deltanet")
    impl = implementation(model)
    assert "`chunked_delta_rule` (analysis/runtime/cpu_ops/delta_rule.py" in impl.cpu
    assert _calls(monkeypatch, model) == {"chunked_delta_rule": impl.layers, "chunked_linear_attention": 0}
    assert impl.cuda == ("fla's Triton kernel `chunk_gated_delta_rule` (fla.ops.gated_delta_rule.chunk) and fla's "
                         "Triton kernel `fused_recurrent_gated_delta_rule` (fla.ops.gated_delta_rule.fused_recurrent)")
    assert impl.loaded_as.startswith("fla's `GatedDeltaNetForCausalLM`")


def test_qwen3_5_line_reads_transformers_binding():
    from family_cases.qwen3_5 import CASE
    impl = implementation(CASE.make_model())
    assert "`chunked_delta_rule`" in impl.cpu
    assert impl.cuda.startswith("fla's Triton kernel `chunk_gated_delta_rule`")   # fla is installed: transformers binds it


def test_a_saved_mamba2_says_it_loaded_as_transformers_class(tmp_path):
    """fla registers its own `mamba2` under the same model type; the project gives the type back to transformers,
    and the line says which class the checkpoint was loaded as."""
    from analysis.models.load import load_model
    make_mamba2("mamba2").save_pretrained(tmp_path / "m")
    model = load_model(str(tmp_path / "m"), device="cpu")
    impl = implementation(model)
    assert impl.loaded_as == ("transformers' `Mamba2ForCausalLM` (transformers.models.mamba2.modeling_mamba2)")
    assert impl.layers == 2 and "chunked_linear_attention" in impl.cpu
