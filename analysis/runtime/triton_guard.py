"""The safety net under the routing: a Triton launch that cannot run here becomes one sentence, not a traceback.

The routing (analysis.runtime.backend, fla_dispatch, each family's routing) covers the fla entry points the project
knows. Anything else fla sends to Triton with CPU tensors — a module a config flag switches on that the routing does
not know, or an op a newer fla adds — would die inside Triton ("0 active drivers ([]). There should only be one.",
or a CPU pointer handed to a GPU kernel). `install()` checks every Triton launch (`KernelInterface.__getitem__`, how
`kernel[grid](...)` starts) and Triton's driver lookup, and raises `UnroutedKernelError` (an AnalysisError: the CLI
prints it and exits 2, the pages show it) naming the module that called, the fla function that launched and what to
do. Advice that names a family's config flags comes from `analysis.archs` through `set_advice` (no family names on
this floor). Kernels run by Triton's interpreter (TRITON_INTERPRET=1, the project's oracle) pass untouched.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

import torch

from analysis.errors import AnalysisError

SKIPPED_FLA_MODULES = ("fla.backends", "fla.utils")   # decorators and dispatch wrappers, not the op itself

_advice: Callable[["UnroutedLaunch"], str | None] | None = None
_installed = False


class UnroutedKernelError(AnalysisError, RuntimeError):
    """An fla op that reached a Triton launch it cannot run on this device. Also a RuntimeError, what Triton raised
    there before: code that probes the driver and falls back on a RuntimeError (fla's device queries) still does."""


class UnroutedLaunch:
    """Where an unrunnable launch came from, read off the Python stack at the launch."""

    def __init__(self, kernel_name: str, fla_function: str | None, fla_module: str | None, modules: list,
                 config=None):
        self.kernel_name = kernel_name
        self.fla_function = fla_function      # the fla function that launched, e.g. "swish_fwd"
        self.fla_module = fla_module          # its module, e.g. "fla.modules.activations.ops"
        self.modules = modules                # nn.Modules on the stack, innermost first
        self.config = config                  # the model's config (outermost module with one), if any
        self.entry = None                     # (function, module): the fla entry point the module called, when
        #                                       the launch happened deeper (chunk_kda -> chunk_local_cumsum_vector)


def set_advice(advice: Callable[[UnroutedLaunch], str | None]) -> None:
    """`advice(launch)` returns what to do instead (a config flag to change, what then runs), or None."""
    global _advice
    _advice = advice


def _frames_from(frame):
    while frame is not None:
        yield frame
        frame = frame.f_back


def locate(kernel_name: str, frame=None) -> UnroutedLaunch:
    """The fla function and the modules on the stack at a launch (`frame`: where to start, the caller by default)."""
    fla_function = fla_module = config = entry = None
    modules = []
    for f in _frames_from(frame or sys._getframe(1)):
        name = f.f_globals.get("__name__", "")
        if name.startswith("fla.") and not name.startswith(SKIPPED_FLA_MODULES):
            if fla_function is None:
                fla_function, fla_module = f.f_code.co_qualname, name
            if not modules and "." not in f.f_code.co_qualname:   # a module-level fla function below the caller
                entry = (f.f_code.co_qualname, name)
        owner = f.f_locals.get("self")
        if isinstance(owner, torch.nn.Module) and f.f_code.co_name == "forward" and \
                not type(owner).__module__.startswith("torch.") and (not modules or modules[-1] is not owner):
            modules.append(owner)
            config = getattr(owner, "config", None) or config
    launch = UnroutedLaunch(kernel_name, fla_function, fla_module, modules, config)
    launch.entry = entry if entry and entry[0] != fla_function else None
    return launch


def sentence(launch: UnroutedLaunch) -> str:
    """One sentence: what launched, from where, that it cannot run here, and what to do."""
    where = "fla's Triton kernel " + f"`{launch.kernel_name}`"
    if launch.fla_function:
        where = f"fla's `{launch.fla_function}` ({launch.fla_module})"
    if launch.entry:
        where = f"fla's `{launch.entry[0]}` ({launch.entry[1]}; its `{launch.fla_function}`, {launch.fla_module})"
    caller = ""
    if launch.modules:
        inner = launch.modules[0]
        caller = f", called by {type(inner).__name__} ({type(inner).__module__}),"
        if type(inner).__module__.startswith("fla.modules"):   # a shared module: say which layer holds it
            outer = next((m for m in launch.modules[1:] if not type(m).__module__.startswith("fla.modules")), None)
            if outer is not None:
                caller = caller[:-1] + f" inside {type(outer).__name__},"
    advice = None
    if _advice is not None:
        try:
            advice = _advice(launch)
        except Exception:  # advice is a courtesy: a failing hint must not hide the sentence itself
            advice = None
    todo = "run the model on a GPU (CUDA), where fla's kernel runs"
    if os.environ.get("FLA_DISABLE_BACKEND_DISPATCH") == "1":
        todo += ", or unset FLA_DISABLE_BACKEND_DISPATCH (the project's CPU ops are registered through fla's dispatch)"
    if advice:
        todo += f", or {advice}"
    return (f"{where}{caller} launched a Triton kernel with CPU tensors, and the project has no CPU version of "
            f"this op, so nothing runs in its place; {todo}.")


def _interpreted(kernel) -> bool:
    """Triton's interpreter (TRITON_INTERPRET=1 at fla's import) runs kernels on CPU tensors: the oracle."""
    seen = 0
    while kernel is not None and seen < 8:
        if type(kernel).__name__ == "InterpretedFunction":
            return True
        kernel, seen = getattr(kernel, "fn", None), seen + 1
    return False


_driver_kinds: tuple[str, ...] | None = None


def _active_backends() -> tuple[str, ...]:
    """Names of Triton's active backends ("nvidia", "amd", a CPU backend's name), once per process."""
    global _driver_kinds
    if _driver_kinds is None:
        from triton.backends import backends
        _driver_kinds = tuple(name for name, b in backends.items() if b.driver.is_active())
    return _driver_kinds


def _has_cpu_tensor(args, kwargs) -> bool:
    return any(torch.is_tensor(a) and a.device.type == "cpu" for a in (*args, *kwargs.values()))


def cannot_run(kernel, args, kwargs) -> bool:
    """A launch that would fail inside Triton: no active driver, or CPU tensors handed to a GPU driver."""
    if _interpreted(kernel):
        return False
    active = _active_backends()
    if not active:
        return True
    return "cpu" not in active and _has_cpu_tensor(args, kwargs)


def _kernel_name(kernel) -> str:
    """The @triton.jit function's name, under any autotune/heuristics wrappers (`.fn` all the way down)."""
    for _ in range(8):
        inner = getattr(kernel, "fn", None)
        if inner is None or inner is kernel:
            break
        kernel = inner
    return getattr(kernel, "__name__", type(kernel).__name__)


def install() -> None:
    """Guard every Triton launch and the driver lookup once per process (idempotent; imports triton)."""
    global _installed
    if _installed:
        return
    import importlib

    from triton.runtime.jit import KernelInterface
    driver_module = importlib.import_module("triton.runtime.driver")  # `triton.runtime.driver` the attribute is
    # the DriverConfig object, which shadows its module

    launch = KernelInterface.__getitem__

    def guarded_getitem(self, grid):
        run = launch(self, grid)

        def start(*args, **kwargs):
            if cannot_run(self, args, kwargs):
                raise UnroutedKernelError(sentence(locate(_kernel_name(self), sys._getframe(1))))
            return run(*args, **kwargs)
        return start
    guarded_getitem.__wrapped__ = launch
    KernelInterface.__getitem__ = guarded_getitem

    create = driver_module._create_driver

    def guarded_create():  # any other path to Triton's driver (a direct `.run`, fla's device queries)
        try:
            return create()
        except RuntimeError as exc:
            if "active drivers" not in str(exc):
                raise
            raise UnroutedKernelError(sentence(locate("(driver lookup)", sys._getframe(1)))) from exc
    guarded_create.__wrapped__ = create
    driver_module._create_driver = guarded_create
    _installed = True
