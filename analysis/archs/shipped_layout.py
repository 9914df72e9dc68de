"""What a saved `pruned_<type>` folder's own code must change in the family's upstream model: its layout.

A pruned type is the family's own (upstream) classes with some layers resized after the family's `__init__`. The
layout says exactly that difference, read off the pruned model itself against the upstream model built from the
same config (on the meta device, no memory): every parameter and buffer whose shape differs, every plain
attribute (head counts, key dims, norm eps, Linear/Conv1d sizes) whose value differs or is new, and every module
whose class differs (a family's key-dim subclass). It goes into config.json as `pruned_layout`, and
`apply_layout` (shipped verbatim in the folder's modeling file: it imports torch only) replays it, so the shipped
code holds no copy of the project's pruning and cannot drift from what the project built.
"""
from __future__ import annotations

import torch
import torch.nn as nn

LAYOUT_KEY = "pruned_layout"
PLAIN = (bool, int, float, str, type(None))
# module attributes that say nothing about sizes: torch's own state and what the project hangs on a loaded model
# (analysis_source, analysis_name, ...)


def _plain(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return isinstance(value, PLAIN)


def upstream_classes(model) -> tuple[type, type]:
    """(config class, causal-LM class) the pruned type subclasses: the family's own, from fla or transformers."""
    return type(model.config).__bases__[0], type(model).__bases__[0]


def upstream_model(model):
    """The family's own model built from `model`'s config on the meta device (the shapes its __init__ gives)."""
    config_cls, model_cls = upstream_classes(model)
    fields = {k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "auto_map", LAYOUT_KEY)}
    with torch.device("meta"):
        return model_cls(config_cls(**fields))


def layout_of(model) -> dict:
    """{"parameters": {path: shape}, "buffers": {path: shape}, "attributes": {module: {name: value}},
    "classes": {module: class name}}: what turns the upstream model into `model` (JSON-able)."""
    upstream = dict(upstream_model(model).named_modules())
    layout: dict = {"parameters": {}, "buffers": {}, "attributes": {}, "classes": {}}
    for path, module in model.named_modules():
        base = upstream.get(path)
        if base is None:
            raise ValueError(f"{path} has no counterpart in the family's own model; its layout cannot be shipped")
        if path and type(module) is not type(base):   # the root is the pruned class itself
            layout["classes"][path] = type(module).__name__
        changed = {name: (list(value) if isinstance(value, tuple) else value) for name, value in vars(module).items()
                   if not name.startswith(("_", "analysis")) and name != "training" and _plain(value)
                   and (name not in vars(base) or vars(base)[name] != value)}
        if changed:
            layout["attributes"][path] = changed
        prefix = f"{path}." if path else ""
        for kind, own, theirs in (("parameters", module._parameters, base._parameters),
                                  ("buffers", module._buffers, base._buffers)):
            for name, tensor in own.items():
                other = theirs.get(name)
                if tensor is not None and (other is None or tuple(other.shape) != tuple(tensor.shape)):
                    layout[kind][prefix + name] = list(tensor.shape)
    return layout


def apply_layout(model, layout, classes=None):
    """Resize `model` (the family's own, just built) to a saved prune's layout; the weights are loaded afterwards.

    Shipped verbatim in every pruned folder's modeling file: torch only, nothing of the project."""
    for path, names in layout.get("attributes", {}).items():
        module = model.get_submodule(path)
        for name, value in names.items():
            if isinstance(getattr(module, name, None), tuple):
                value = tuple(value)
            setattr(module, name, value)
    for kind in ("parameters", "buffers"):
        for path, shape in layout.get(kind, {}).items():
            owner_path, _, name = path.rpartition(".")
            owner = model.get_submodule(owner_path)
            old = getattr(owner, name)
            empty = torch.empty(shape, device=old.device, dtype=old.dtype)
            if kind == "parameters":
                new = nn.Parameter(empty, requires_grad=old.requires_grad)
                new.__dict__.update(old.__dict__)   # optimiser hints such as fla's _no_weight_decay
                setattr(owner, name, new)
            else:
                owner.register_buffer(name, empty, persistent=name not in owner._non_persistent_buffers_set)
    for path, name in layout.get("classes", {}).items():
        model.get_submodule(path).__class__ = (classes or {})[name]
