"""fla's own seam for other backends (fla/backends.py) as the project's CPU route.

fla 0.6 wraps many ops in `dispatch`: a `BackendRegistry` per function (`@dispatch`) or per operation
(`@dispatch('gated_delta_rule')`) tries each registered backend whose `verifier` accepts the call, in priority order, before its
own Triton code. The project registers one backend there, `StateRankCPU`, whose verifier accepts CPU tensors only:
a CUDA call never sees it, so fla's choice on a GPU is untouched. Where fla offers no dispatch, the project still
patches module attributes (analysis.runtime.backend, each family's routing); docs/fla-routing.md lists both.

`register_function(fla_fn, cpu_fn)` covers a function-level dispatch; `register_operation(op, name, impl, verifier)`
one function of an operation-level registry; the recurrence entry points register through
`analysis.runtime.backend.route_entry_points` (which adds the state observer). With FLA_DISABLE_BACKEND_DISPATCH=1
fla bypasses every registry, so these fall back to patching the module global fla's callers look up, and say so
(`registered`).
"""
from __future__ import annotations

import importlib
from typing import Callable

import torch

BACKEND_TYPE = "state_rank_cpu"
PRIORITY = -1   # before fla's own optional backends (Ascend, TileLang, Gluon: 0..5); the verifier keeps it to CPU

_operations: dict[str, dict[str, tuple[Callable, Callable]]] = {}   # op -> function name -> (impl, verifier)
registered: dict[str, str] = {}   # "module.function" -> "dispatch" or "patched" (what docs/fla-routing.md counts)


def tensors(args, kwargs):
    return [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]


def on_cpu(*args, **kwargs) -> tuple[bool, str | None]:
    """fla's verifier contract: (accepted, why not). Every tensor argument on the CPU."""
    found = tensors(args, kwargs)
    if found and all(t.device.type == "cpu" for t in found):
        return True, None
    return False, "not CPU tensors"


def dispatch_enabled() -> bool:
    import fla.backends
    return not getattr(fla.backends, "_DISPATCH_DISABLED", False)


def _backend_base():
    from fla.backends import BaseBackend

    class StateRankCPU(BaseBackend):
        """The project's torch ops for CPU tensors (analysis.runtime.cpu_ops)."""
        backend_type = BACKEND_TYPE
        priority = PRIORITY
    return StateRankCPU


def _name(fn) -> str:
    return f"{fn.__module__}.{fn.__name__}"


def register_function(fla_fn, cpu_fn, verifier: Callable = on_cpu, patch: Callable | None = None) -> str:
    """Register `cpu_fn` for CPU calls of the @dispatch-wrapped `fla_fn`: 'dispatch'. Where dispatch is off,
    `patch(module, name, cpu_fn)` (analysis.runtime.backend's) routes the module global of that name instead:
    'patched'."""
    from fla.backends import register
    if dispatch_enabled():
        register(fla_fn, backend=_backend_base(), verifier=verifier)(cpu_fn)
        how = "dispatch"
    else:
        patch(importlib.import_module(fla_fn.__module__), fla_fn.__name__, cpu_fn)
        how = "patched"
    registered[_name(fla_fn)] = how
    return how


def register_operation(operation: str, function_name: str, implementation: Callable,
                       verifier: Callable = on_cpu) -> None:
    """Register `implementation` as `function_name` of fla's operation registry `operation` (e.g. 'gated_delta_rule').

    One backend serves all of an operation's functions (fla picks the method named like the function), so every
    call re-registers the backend with all methods so far; functions it has no method for pass to fla's."""
    from fla.backends import register
    methods = _operations.setdefault(operation, {})
    methods[function_name] = (implementation, verifier)
    attributes = {}
    for name, (impl, check) in methods.items():
        attributes[name] = staticmethod(impl)
        attributes[f"{name}_verifier"] = staticmethod(check)
    backend_cls = type(f"StateRankCPU_{operation.replace('.', '_')}", (_backend_base(),), attributes)
    register(operation, backend=backend_cls)(backend_cls)


def routes_to_project(fla_fn) -> bool:
    """Whether calls of `fla_fn` on CPU tensors reach the project's backend (registered and dispatch enabled)."""
    return dispatch_enabled() and registered.get(_name(getattr(fla_fn, "__wrapped__", fla_fn))) == "dispatch"


ACTIVATIONS = "fla.modules.activations.ops"
L2NORM = "fla.modules.norm.l2norm"
# (fla module, function name): fla's @dispatch entry points the project runs on CPU through the registry
FUNCTIONS = tuple((ACTIVATIONS, name) for name in (
    "swish_fwd", "swish_bwd", "sigmoid_fwd", "sigmoid_bwd", "logsigmoid_fwd", "logsigmoid_bwd", "elu_p1_fwd",
    "elu_p1_bwd", "swiglu_fwd", "swiglu_fwdbwd", "swiglu_linear", "powglu_fwd", "powglu_fwdbwd", "powglu_linear")) + \
    tuple((L2NORM, name) for name in ("l2norm_fwd", "l2norm_bwd"))


def install(patch: Callable) -> None:
    """Register the project's CPU activations and l2 norm with fla's dispatch (idempotent: a registry keeps one
    backend per type); `patch(module, name, cpu_fn)` where dispatch is off."""
    from analysis.runtime.cpu_ops import activations
    for module, name in FUNCTIONS:
        register_function(getattr(importlib.import_module(module), name), getattr(activations, name), patch=patch)
