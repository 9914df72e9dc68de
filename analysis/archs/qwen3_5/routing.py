"""Device routing for transformers' Qwen3.5 / Qwen3.5-MoE / Qwen3-Next / OLMo-hybrid Gated DeltaNet layers.

transformers binds `torch_chunk_gated_delta_rule` / `torch_recurrent_gated_delta_rule` (module globals of
each modeling file, looked up at call time) to fla's Triton kernels whenever fla is importable, so a CPU
forward dies in Triton ("0 active drivers"). The conv and the gated RMSNorm take fla/causal-conv1d only
through the `kernels` hub or `causal_conv1d`, neither of which this project installs, so they already run
torch. We replace the two recurrence globals: CUDA tensors keep transformers' bound kernel (fla), CPU tensors
take `analysis.runtime.backend`'s torch recurrence; on both devices the observer sees the prepared inputs, with
q_raw/k_raw per KEY head (transformers hands the kernel Hk key heads and Hv value heads; the repeat to the
value heads happens inside the kernel, and inside the recurrence's `prepare`,
`analysis.runtime.recurrences`).
"""
from __future__ import annotations

from analysis.archs.hf_routing import by_device_named, route_modules

MODELING_MODULES = ("transformers.models.qwen3_5.modeling_qwen3_5",
                    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
                    "transformers.models.qwen3_next.modeling_qwen3_next",
                    "transformers.models.olmo_hybrid.modeling_olmo_hybrid")
ENTRY_POINTS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")


def install(recurrence) -> None:
    """Route every importable Qwen GDN modeling module once per process (idempotent) to `recurrence`."""
    route_modules(MODELING_MODULES, ENTRY_POINTS, by_device_named(recurrence))
