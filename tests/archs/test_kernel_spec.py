"""Issue 20: each family's kernel spec is the one place for key-dim limits and GPU dtypes.

No GPU is needed: the rules are checked where they are applied (plan/prune, load dtype, latency) before any
kernel runs, so a CUDA device type is enough to exercise them; the CPU path keeps every key dim."""
import pytest
import torch

from analysis.archs import FAMILIES, get_adapter
from analysis.archs.kernels import KERNELS, MAX_KEY_DIM, kernel_spec
from analysis.errors import AnalysisError
from analysis.evaluate.latency import kernel_latency
from analysis.models.load import resolve_dtype


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_adapter_names_a_kernel_spec(family):
    spec = get_adapter(family).kernel_spec
    assert spec is KERNELS[get_adapter(family).kernel]
    assert 1 <= spec.min_key_dim <= spec.max_key_dim <= MAX_KEY_DIM and spec.gpu_dtypes


def test_kda_below_its_gpu_minimum_is_refused_on_cuda_only():
    """fla issue 22: chunk_kda crashes in tl.dot at head_k_dim 8 (BK = next_power_of_2(K) < 16)."""
    kda = get_adapter("kda")
    kda.check_key_dims([8, 16], "cpu")                  # the CPU path runs any key dim
    with pytest.raises(AnalysisError, match="below 9: .* GPU kernel runs key dims of at least 9") as refused:
        kda.check_key_dims([16, 8], "cuda")
    assert "\n" not in str(refused.value) and "round the plan up" in str(refused.value)
    kda.check_key_dims([9, 16], "cuda")
    get_adapter("delta_net").check_key_dims([1, 8], "cuda")   # fla's delta rule has no such minimum
    with pytest.raises(AnalysisError, match="Key dim 8 is below 9"):   # refused before any kernel is looked up
        next(kernel_latency([8], device="cuda", kernel="kda"))


def test_key_dims_beyond_the_kernel_maximum_are_refused_on_every_device():
    for device in ("cpu", "cuda"):
        with pytest.raises(AnalysisError, match="outside 1..256"):
            get_adapter("gated_deltanet").check_key_dims([64, 257], device)
    with pytest.raises(AnalysisError, match="outside 1..256"):
        next(kernel_latency([300]))


def test_gpu_dtypes_come_from_the_spec():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    delta, gated = kernel_spec("delta_rule"), kernel_spec("gated_delta_rule")
    assert resolve_dtype(None, cpu, delta) == torch.float32
    assert resolve_dtype("auto", cuda, delta) == torch.bfloat16
    assert resolve_dtype("float16", cuda, delta) == torch.float16
    with pytest.raises(AnalysisError, match="refuses float32"):
        resolve_dtype("float32", cuda, delta)          # ChunkDeltaRuleFunction asserts dtype != float32
    assert resolve_dtype("float32", cuda, gated) == torch.float32
    assert resolve_dtype("float32", cpu, delta) == torch.float32
    assert delta.timing_dtype("float32", "cuda") == "bfloat16" and delta.timing_dtype("float32", "cpu") == "float32"


@pytest.mark.parametrize("model_type, key", [("pruned_delta_net", "head_k_dims"),
                                             ("pruned_qwen3_5_text", "linear_key_head_dims"),
                                             ("pruned_kimi_linear", "linear_key_head_dims")])
def test_each_family_s_per_layer_key_dims_are_validated(model_type, key, tmp_path):
    """The adapter names its pruned config's per-layer key-dims key, so Qwen and Kimi configs are checked too."""
    from analysis.models.checkpoint import validate_config
    config = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 64, "vocab_size": 100}
    assert validate_config({**config, key: [16, 32]}, tmp_path)
    for bad in ([0, 16], [16, 16, 16], "16", [16.5]):
        with pytest.raises(AnalysisError, match=f"{key} in .* must list one whole key dim"):
            validate_config({**config, key: bad}, tmp_path)
