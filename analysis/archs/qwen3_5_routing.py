"""Device routing for transformers' Qwen3.5 / Qwen3.5-MoE / Qwen3-Next / OLMo-hybrid Gated DeltaNet layers.

transformers binds `torch_chunk_gated_delta_rule` / `torch_recurrent_gated_delta_rule` (module globals of
each modeling file, looked up at call time) to fla's Triton kernels whenever fla is importable, so a CPU
forward dies in Triton ("0 active drivers"). The conv and the gated RMSNorm take fla/causal-conv1d only
through the `kernels` hub or `causal_conv1d`, neither of which this project installs, so they already run
torch. We replace the two recurrence globals: CUDA tensors keep transformers' bound kernel (fla), CPU tensors
take `analysis.runtime.backend`'s torch recurrence; on both devices the observer sees the prepared inputs, with
q_raw/k_raw per KEY head (transformers hands the kernel Hk key heads and Hv value heads; the repeat to the
value heads happens inside the kernel, and inside `analysis.runtime.backend.prepare`).
"""
from __future__ import annotations

import importlib

from analysis.runtime import backend

MODELING_MODULES = ("transformers.models.qwen3_5.modeling_qwen3_5",
                    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
                    "transformers.models.qwen3_next.modeling_qwen3_next",
                    "transformers.models.olmo_hybrid.modeling_olmo_hybrid")
ENTRY_POINTS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")


def _fla_named(bound_kernel):
    """transformers' entry point called with fla's argument names (q, k, v, g, beta, ...), which is what
    `backend.by_device` binds; transformers' own wrapper still filters the keyword arguments for its kernel."""
    def entry(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
        return bound_kernel(q, k, v, g=g, beta=beta, initial_state=initial_state,
                            output_final_state=output_final_state,
                            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens, **kwargs)
    entry.__name__ = getattr(bound_kernel, "__name__", "gated_delta_rule")
    return entry


def torch_fallback(module, name: str):
    """transformers' own pure-torch implementation of an entry point (the function its wrapper decorates)."""
    fn = getattr(module, name)
    while getattr(fn, "_analysis_routed", False) or hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def install() -> None:
    """Route every importable Qwen GDN modeling module once per process (idempotent)."""
    for path in MODELING_MODULES:
        try:
            module = importlib.import_module(path)
        except ImportError:  # an older transformers without this family
            continue
        route(module, ENTRY_POINTS)


def route(module, names) -> None:
    """Replace the entry points `names` of a transformers modeling module by device-routed versions
    (idempotent); also used for Kimi Linear's KDA entry points, which take the same arguments."""
    def wrap(current):
        routed = backend.by_device(_fla_named(current))
        routed.__wrapped__ = current
        return routed
    backend.route(module, names, wrap)
