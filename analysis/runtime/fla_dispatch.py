"""fla's own seam for other backends (fla/backends.py) as the project's CPU route.

fla 0.6 wraps many ops in `dispatch`: a `BackendRegistry` per function (`@dispatch`) or per operation
(`@dispatch('kda')`) tries each registered backend whose `verifier` accepts the call, in priority order, before its
own Triton code. The project registers one backend there, `StateRankCPU`, whose verifier accepts CPU tensors only:
a CUDA call never sees it, so fla's choice on a GPU is untouched. Where fla offers no dispatch, the project still
patches module attributes (analysis.runtime.backend, each family's routing); docs/fla-routing.md lists both.

`register_function(fla_fn, cpu_fn)` covers a function-level dispatch; `register_operation(op, name, impl, verifier)`
one function of an operation-level registry. With FLA_DISABLE_BACKEND_DISPATCH=1 fla bypasses every registry, so
these fall back to patching the module global fla's callers look up (`backend.route`), and say so.
"""
from __future__ import annotations

import contextvars
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


def register_function(fla_fn, cpu_fn, verifier: Callable = on_cpu) -> str:
    """Register `cpu_fn` for CPU calls of the @dispatch-wrapped `fla_fn`; 'dispatch', or 'patched' where dispatch
    is off (then the module global of that name takes `cpu_fn` for CPU tensors)."""
    from fla.backends import register
    if dispatch_enabled():
        register(fla_fn, backend=_backend_base(), verifier=verifier)(cpu_fn)
        how = "dispatch"
    else:
        from analysis.runtime import backend
        backend.route(importlib.import_module(fla_fn.__module__), (fla_fn.__name__,), backend.torch_on_cpu(cpu_fn))
        how = "patched"
    registered[_name(fla_fn)] = how
    return how


def register_operation(operation: str, function_name: str, implementation: Callable,
                       verifier: Callable = on_cpu) -> None:
    """Register `implementation` as `function_name` of fla's operation registry `operation` (e.g. 'kda').

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


_passing = contextvars.ContextVar("fla_dispatch_passing", default=False)


def recurrence_verifier(*args, **kwargs) -> tuple[bool, str | None]:
    """CPU tensors, or CUDA ones while an observer collects states (analysis.runtime.backend.observe_recurrences):
    the project's route tells the observer, then hands the call back to fla (`_passing`), which picks as before."""
    from analysis.runtime import backend
    if _passing.get():
        return False, "handed back to fla"
    accepted, why = on_cpu(*args, **kwargs)
    return (True, None) if accepted or backend.observing() else (False, why)


def _handed_back(public_fn):
    """`public_fn` (fla's dispatched entry point) called with the project's backend stepping aside."""
    def call(*args, **kwargs):
        token = _passing.set(True)
        try:
            return public_fn(*args, **kwargs)
        finally:
            _passing.reset(token)
    call.__wrapped__ = public_fn   # inspect.signature (backend.by_device binds the arguments) follows it
    call.__name__ = public_fn.__name__
    return call


def register_recurrence(public_fn, prepare, operation: str | None = None) -> bool:
    """Route fla's recurrence entry point `public_fn` through its dispatch: CPU calls take the project's chunked
    recurrence (`backend.by_device` with `prepare`), CUDA calls fla's kernel (the observer told). `operation`: the
    registry's name for an operation-level `@dispatch('op')`, None for a function-level `@dispatch`. False where
    dispatch is off: the caller patches the layer's module global instead."""
    from analysis.runtime import backend
    if not dispatch_enabled():
        return False
    implementation = backend.by_device(_handed_back(public_fn), prepare)
    if operation is None:
        register_function(public_fn, implementation, verifier=recurrence_verifier)
    else:
        register_operation(operation, public_fn.__name__, implementation, recurrence_verifier)
        registered[_name(public_fn)] = "dispatch"
    return True


def route_entry_points(module, names, recurrence, dispatched: dict[str, str | None]) -> None:
    """A layer file's recurrence entry points `names`: those fla dispatches (`dispatched`: name -> operation, None
    for a function-level dispatch) through fla's registry, the rest patched (`backend.route_recurrence`)."""
    from analysis.runtime import backend
    patched = []
    for name in names:
        fn = getattr(module, name)
        fn = fn.__wrapped__ if getattr(fn, "_analysis_routed", False) else fn
        if not (name in dispatched and register_recurrence(fn, recurrence.prepare, dispatched[name])):
            patched.append(name)
    backend.route_recurrence(module, patched, recurrence)


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


def install() -> None:
    """Register the project's CPU activations and l2 norm with fla's dispatch (idempotent: a registry keeps one
    backend per type)."""
    from analysis.runtime.cpu_ops import activations
    for module, name in FUNCTIONS:
        register_function(getattr(importlib.import_module(module), name), getattr(activations, name))
