"""Which implementation runs a model's linear layers on each device, read from the routing itself.

Every adapter names its recurrence entry points (`Adapter.entry_points`): module globals of the layer's modeling
file that its `install_routing` replaces by device-routed versions (`analysis.runtime.backend.route`), or, where fla
dispatches the entry point itself, routes through fla's backend registry (`analysis.runtime.fla_dispatch`). A routed entry point
keeps what the family bound for CUDA as `__wrapped__`; transformers' `use_kernel_func_from_hub_with_fallback`
binds, in turn, the package kernel it found at import (fla, mamba_ssm) or its own torch code. On CPU a routed entry
point runs the chunked op of the recurrence the kernel spec names (`analysis.runtime.recurrences`: the delta rule,
linear attention with a decay per head or per key channel, or RWKV-7's diagonal-plus-low-rank rule). So the
sentence below is what will run, not a per-family text.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

from analysis.archs import adapter_for
from analysis.runtime import fla_dispatch

# package -> (whose, what kind of op it ships)
OWNERS = {"fla": ("fla's", "Triton kernel "), "mamba_ssm": ("mamba_ssm's", "CUDA kernel "),
          "transformers": ("transformers'", "own pure-torch "), "analysis": ("the project's", "")}


@dataclass(frozen=True)
class Implementation:
    op: str                 # the kernel spec's label, e.g. "Mamba-2 SSD scan (scalar-decay linear attention)"
    layers: int             # linear layers it runs
    device: str             # "cpu" or "cuda": where this model is
    cpu: str                # what runs on CPU, in words
    cuda: str               # what runs on CUDA, in words
    loaded_as: str          # the model class and where it comes from

    def lines(self) -> list[str]:
        here = {"cpu": " (what runs here: this model is on the CPU)", "cuda": " (what runs here: this model is on a GPU)"}
        return [f"Loaded as {self.loaded_as}.",
                f"Each of the {self.layers} linear layers runs the {self.op}: on CPU {self.cpu}"
                f"{here['cpu'] if self.device == 'cpu' else ''}; on CUDA, {self.cuda}"
                f"{here['cuda'] if self.device == 'cuda' else ''}."]


def _owner(obj) -> tuple[str, str]:
    package = (getattr(obj, "__module__", "") or "?").split(".")[0]
    return OWNERS.get(package, (f"{package}'s", ""))


def _function(fn) -> str:
    """`fn` in words: whose it is, what kind, its name and its module."""
    whose, what = _owner(fn)
    return f"{whose} {what}`{getattr(fn, '__name__', fn)}` ({getattr(fn, '__module__', '?')})"


def bound_kernel(fn) -> tuple[object, str]:
    """(what a transformers entry point calls, why) — the package kernel its hub-kernel wrapper found at import,
    or its own torch code with the package that was missing; (fn, "") for any other function."""
    try:
        names = inspect.getclosurevars(fn).nonlocals
    except (TypeError, ValueError):
        return fn, ""
    impl, package = names.get("implementation"), names.get("package")
    if not callable(impl):
        return fn, ""
    if impl is names.get("torch_function"):
        return impl, f"{package} is not installed" if package else ""
    return impl, ""


def _entry(layer_cls: type, name: str):
    """The entry point `name` as the layer's file looks it up (a subclass's file may not hold it: follow the MRO)."""
    for cls in layer_cls.__mro__:
        module = sys.modules.get(cls.__module__)
        if module is not None and callable(getattr(module, name, None)):
            return getattr(module, name)
    return None


def implementation(model) -> Implementation:
    """What runs the linear layers of `model` on CPU and on CUDA, read from its adapter's routed entry points."""
    adapter = adapter_for(model)
    spec = adapter.kernel_spec
    layers = adapter.linear_layers(model)
    op = spec.recurrence.chunked_op
    cpu_text = f"the project's chunked op `{op.__name__}` ({op.__module__.replace('.', '/')}.py, fp32 inside)"
    routed, cuda = True, []
    for name in adapter.entry_points:
        fn = next((f for f in (_entry(type(layer), name) for layer in layers) if f is not None), None)
        if fn is None:
            continue
        routed = routed and (getattr(fn, "_analysis_routed", False) or fla_dispatch.routes_to_project(fn))
        kernel, why = bound_kernel(getattr(fn, "__wrapped__", fn) if getattr(fn, "_analysis_routed", False) else fn)
        cuda.append(_function(kernel) + (f", as {why}" if why else ""))
    if not routed:  # only before analysis.ready() (or install_routing) ran
        cpu_text = "the family's own op (not routed yet: analysis.ready() routes it to the project's chunked op)"
    param = next(model.parameters())
    cls = type(model)
    return Implementation(op=spec.label, layers=len(layers), device=param.device.type, cpu=cpu_text,
                          cuda=" and ".join(dict.fromkeys(cuda)) or "the family's bound kernel",
                          loaded_as=f"{_owner(cls)[0]} `{cls.__name__}` ({cls.__module__})")
