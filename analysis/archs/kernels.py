"""What each family's GPU kernel accepts: the one place for key-dim limits, tile rows and GPU dtypes.

An adapter names its kernel (`Adapter.kernel`); `kernel_spec(name)` gives the spec that `latency` times,
`prune` checks a plan against, and `models` uses to pick (or refuse) a dtype on a GPU; `spec.recurrence` is the kind
of recurrence the kernel runs (analysis.runtime.recurrences: the CPU op, equations, inputs). On CPU the project's
chunked torch path runs every key dim and dtype, so the limits below apply to CUDA only, except the maximum,
which every saved model keeps so that it still runs on a GPU later.
"""
from __future__ import annotations

from dataclasses import dataclass

from analysis.errors import AnalysisError

GPU_DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class KernelSpec:
    name: str                              # what adapters name in `Adapter.kernel`
    label: str                             # for people: "gated delta rule"
    recurrence_name: str                   # the kind of recurrence it runs (analysis.runtime.recurrences)
    cuda_op: tuple[str, str]               # fla's CUDA entry point (module, function)
    min_key_dim: int = 1                   # smallest key dim the CUDA kernel runs
    max_key_dim: int = 256                 # fla's chunk kernels assert K <= 256
    tile_rows: int = 64                    # the chunk kernel holds the state in tiles of this many key rows
    gpu_dtypes: tuple[str, ...] = GPU_DTYPES   # dtypes its CUDA kernel accepts; the first is the GPU default
    min_reason: str = ""                   # why min_key_dim, for the sentence that refuses below it
    cuda_names: tuple = ()                 # (ours, the CUDA op's) argument names where they differ (q, k, v, g, beta, a, b)
    cuda_settings: tuple = ()              # fixed (keyword, value) pairs the family's layer passes to the CUDA op

    @property
    def recurrence(self):
        """The Recurrence it runs: its CPU op, reference loop, preparation, equations and latency inputs. Imported on
        first use: the kernel specs import no torch (the CLI's --help)."""
        from analysis.runtime.recurrences import recurrence_named
        return recurrence_named(self.recurrence_name)

    def key_dim_problem(self, dk: int, device_type: str) -> str | None:
        if not 1 <= dk <= self.max_key_dim:
            return f"key dim {dk} is outside 1..{self.max_key_dim}, the range fla's {self.label} kernels support"
        if device_type == "cuda" and dk < self.min_key_dim:
            return (f"key dim {dk} is below {self.min_key_dim}: fla's {self.label} GPU kernel runs key dims of at "
                    f"least {self.min_key_dim} ({self.min_reason}); prune less, round the plan up to a multiple of "
                    "16, or run on the CPU")
        return None

    def check_key_dims(self, dims, device_type: str = "cpu") -> None:
        """One sentence for the first key dim this kernel cannot run on `device_type` ("cpu" or "cuda")."""
        for dk in dims:
            problem = self.key_dim_problem(int(dk), device_type)
            if problem:
                raise AnalysisError(problem[0].upper() + problem[1:] + ".")

    def gpu_dtype(self, dtype: str | None) -> str:
        """The dtype to run on a GPU: the spec's default for None/"auto", else `dtype` if the kernel takes it."""
        if dtype in (None, "auto"):
            return self.gpu_dtypes[0]
        if dtype not in self.gpu_dtypes:
            raise AnalysisError(f"fla's {self.label} GPU kernel refuses {dtype}; use "
                                f"{' or '.join(self.gpu_dtypes)} on a GPU (float32 stays exact on the CPU).")
        return dtype

    def timing_dtype(self, dtype: str, device_type: str) -> str:
        """The dtype to time this kernel in: the model's own, except one its GPU kernel refuses (then its default)."""
        return dtype if device_type != "cuda" or dtype in self.gpu_dtypes else self.gpu_dtypes[0]


KERNELS = {spec.name: spec for spec in (
    KernelSpec("delta_rule", "delta rule", "delta_rule", ("fla.ops.delta_rule", "chunk_delta_rule"),
               gpu_dtypes=("bfloat16", "float16")),  # ChunkDeltaRuleFunction asserts dtype != float32
    KernelSpec("gated_delta_rule", "gated delta rule", "gated_delta_rule",
               ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")),
    # chunk_intra.py feeds BK = next_power_of_2(K), with no floor of 16, into tl.dot (which needs >= 16): K <= 8 fails
    KernelSpec("kda", "Kimi delta attention (per-channel gated delta rule)", "per_channel_delta_rule",
               ("fla.ops.kda", "chunk_kda"),
               min_key_dim=9, min_reason="its intra-chunk kernel needs a key block of at least 16"),
    # GLA: per-key-channel decay, no delta rule; fla's chunk kernels tile K in blocks of 32/64 (masked), no minimum
    KernelSpec("gla", "gated linear attention (per-channel decay, no delta rule)", "gated_linear_attention",
               ("fla.ops.gla", "chunk_gla")),
    # RWKV-7: the DPLR generalised delta rule (per-channel decay plus a rank-one term a, b); its chunk kernels pad K
    # to at least 16 (BK = max(next_power_of_2(K), 16)), so no minimum either
    KernelSpec("rwkv7", "RWKV-7 generalised delta rule (per-channel decay + rank-one transition)", "dplr_delta_rule",
               ("fla.ops.rwkv7", "chunk_rwkv7"), cuda_names=(("q", "r"), ("g", "w")),
               cuda_settings=(("scale", 1.0), ("safe_gate", True), ("lower_bound", -0.6065306597126334),
                              ("chunk_size", 64))),   # as fla/layers/rwkv7.py calls it
    # Mamba-2's SSD scan is scalar-decay linear attention with dk = N (q = C, k = B, v = dt·x, g = A·dt). The models
    # run mamba_ssm's mamba_chunk_scan_combined on CUDA when it is installed (the project does not install it), else
    # transformers' torch SSD; `latency` times fla's chunk_simple_gla, the same recurrence, on CUDA (not verified on
    # a GPU here) and the project's chunked linear attention on CPU. mamba_ssm pads N to max(16, next power of 2).
    KernelSpec("ssd", "Mamba-2 SSD scan (scalar-decay linear attention)", "linear_attention",
               ("fla.ops.simple_gla", "chunk_simple_gla")),
)}
MAX_KEY_DIM = max(spec.max_key_dim for spec in KERNELS.values())   # the widest any family's kernel runs
TILE_ROWS = 64   # every fla chunk kernel above (the one number the pages draw as tile boundaries)
assert all(spec.tile_rows == TILE_ROWS for spec in KERNELS.values())


def dtype_words() -> str:
    """The dtypes the GPU kernels default to and refuse, in words (the sidebar's dtype help)."""
    defaults = sorted({spec.gpu_dtypes[0] for spec in KERNELS.values()})
    refusals = [f"fla's {spec.label} kernel refuses {', '.join(d for d in GPU_DTYPES if d not in spec.gpu_dtypes)}"
                for spec in KERNELS.values() if set(GPU_DTYPES) - set(spec.gpu_dtypes)]
    return f"on a GPU the family kernel's default ({' or '.join(defaults)}" + "".join(f"; {r}" for r in refusals) + ")"


def kernel_spec(name: str) -> KernelSpec:
    if name not in KERNELS:
        raise AnalysisError(f"No latency kernel named {name!r}; known: {', '.join(KERNELS)}.")
    return KERNELS[name]
