"""Device routing for the recurrence entry points of transformers' modeling files (Qwen3.5's family, Kimi Linear).

transformers binds such entry points (module globals of each modeling file, looked up at call time) to fla's
Triton kernels whenever fla is importable, so a CPU forward dies in Triton ("0 active drivers"). `route` replaces
them: CUDA tensors keep transformers' bound kernel (fla), CPU tensors take `analysis.runtime.backend`'s torch
recurrence; on both devices the observer sees the prepared inputs.
"""
from __future__ import annotations

import importlib

from analysis.runtime import backend


def fla_named(bound_kernel):
    """transformers' entry point called with fla's argument names (q, k, v, g, beta, ...), which is what
    `backend.by_device` binds; transformers' own wrapper still filters the keyword arguments for its kernel."""
    def entry(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
        return bound_kernel(q, k, v, g=g, beta=beta, initial_state=initial_state,
                            output_final_state=output_final_state,
                            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens, **kwargs)
    entry.__name__ = getattr(bound_kernel, "__name__", "gated_delta_rule")
    return entry


def by_device_named(recurrence):
    """A `backend.route` wrap for a transformers entry point taking the (gated) delta rule's arguments (Qwen3.5's
    gated delta rule, Kimi Linear's KDA): device-routed with `recurrence`'s `prepare` under fla's argument names."""
    def wrap(current):
        routed = backend.by_device(fla_named(current), recurrence.prepare)
        routed.__wrapped__ = current
        return routed
    return wrap


def route_modules(paths, names, wrap) -> list:
    """Route the entry points `names` of every importable modeling module in `paths` (idempotent) with `wrap`;
    the modules routed (an older transformers lacks some families)."""
    modules = []
    for path in paths:
        try:
            module = importlib.import_module(path)
        except ImportError:
            continue
        backend.route(module, names, wrap)
        modules.append(module)
    return modules
