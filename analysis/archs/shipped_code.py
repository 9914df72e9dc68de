"""The configuration_*.py and modeling_*.py a saved `pruned_<type>` folder carries, so that it loads with
`AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)` where torch, transformers (and fla, for fla
families) are installed but this project is not (Hugging Face's convention for an architecture transformers does
not ship: `auto_map` in config.json names the two files' classes).

One template for every family: the configuration subclasses the family's upstream config with the pruned model
type; the modeling file subclasses the family's upstream causal-LM class and, after its `__init__`, replays the
config's `pruned_layout` (analysis.archs.shipped_layout.apply_layout, shipped verbatim). A family whose pruned
layers need more than sizes (Kimi Linear's key-dim forward, Falcon-H1's per-layer multipliers) adds its part
through its adapter's `shipped_parts` (ShippedParts: imports, source, the classes the layout names, a hook run
after __init__ and members of the model class), each written from functions that import nothing of the project.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from analysis.archs.base import file_stem, is_pruned_type
from analysis.archs.shipped_layout import LAYOUT_KEY, apply_layout, layout_of

MARK = "Written by the state-rank dashboard"
# fla's configs take their fields in __init__ (not as a transformers dataclass): a subclass keeps that __init__,
# as the project's own pruned config does; the per-layer fields (head_k_dims, ...) pass through as extra kwargs
PASS_THROUGH_INIT = "\n    def __init__(self, **kwargs):\n        super().__init__(**kwargs)\n"


@dataclass(frozen=True)
class ShippedParts:
    """A family's additions to the modeling template (all source text that imports nothing of the project)."""
    imports: str = ""              # import lines
    source: str = ""               # functions and classes
    classes: tuple[str, ...] = ()  # classes the layout may name (apply_layout's `classes`)
    after_init: str = ""           # one statement run at the end of __init__ (`self` is the model)
    members: str = ""              # methods of the model class, indented by 4


@dataclass(frozen=True)
class Shipped:
    """What save writes for a pruned type: file name → text, and config.json's additions."""
    files: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def ships_code(model) -> bool:
    """A model of the project's registered pruned types (a uniform prune the family's own type holds ships none)."""
    return is_pruned_type(str(getattr(model.config, "model_type", "")))


def shipped(model, parts: ShippedParts | None = None) -> Shipped:
    """The folder's code and config.json additions for `model` (of a registered pruned type); `parts`: its
    family's additions (the adapter's `shipped_parts`)."""
    parts = parts or ShippedParts()
    model_type = model.config.model_type
    stem = file_stem(model_type)
    config_cls, model_cls = type(model.config).__bases__[0], type(model).__bases__[0]
    config_name, model_name = type(model.config).__name__, type(model).__name__
    needs_fla = config_cls.__module__.split(".")[0] == "fla" or model_cls.__module__.split(".")[0] == "fla"
    needs = "torch, transformers and fla" if needs_fla else "torch and transformers"
    header = (f'"""{MARK} for `{model_type}`: the family\'s own {model_cls.__name__} '
              f"with the per-layer sizes of config.json's `{LAYOUT_KEY}`.\n\n"
              f"Load with AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True); needs {needs}, "
              f'not the dashboard.\n"""\n')
    configuration = (header
                     + f"from {config_cls.__module__} import {config_cls.__name__} as UpstreamConfig\n\n\n"
                     + f"class {config_name}(UpstreamConfig):\n    model_type = {model_type!r}\n"
                     + (PASS_THROUGH_INIT if "__init__" in vars(type(model.config)) else ""))
    classes = ", ".join(f"{name!r}: {name}" for name in parts.classes)
    after = f"        {parts.after_init}\n" if parts.after_init else ""
    modeling = (header + "import torch\nimport torch.nn as nn\n"
                + f"from {model_cls.__module__} import {model_cls.__name__} as UpstreamForCausalLM\n"
                + (parts.imports.strip() + "\n" if parts.imports else "")
                + f"\nfrom .configuration_{stem} import {config_name}\n\n\n"
                + inspect.getsource(apply_layout) + "\n\n"
                + (parts.source.strip() + "\n\n\n" if parts.source else "")
                + f"CLASSES = {{{classes}}}\n\n\n"
                + f"class {model_name}(UpstreamForCausalLM):\n    config_class = {config_name}\n\n"
                + "    def __init__(self, config):\n        super().__init__(config)\n"
                + f"        apply_layout(self, config.{LAYOUT_KEY}, CLASSES)\n" + after
                + (parts.members.rstrip() + "\n" if parts.members else ""))
    auto_map = {"AutoConfig": f"configuration_{stem}.{config_name}",
                "AutoModelForCausalLM": f"modeling_{stem}.{model_name}"}
    return Shipped(files={f"configuration_{stem}.py": configuration, f"modeling_{stem}.py": modeling},
                   config={"auto_map": auto_map, LAYOUT_KEY: layout_of(model)})
