"""A model built without memory, whose weights are materialised one unit at a time and released again.

The skeleton is the family's own model class built on the meta device (transformers' own `from_pretrained` builds on
meta too), with its non-persistent buffers (rotary frequencies, Falcon-H1's μP vector) made real and initialised by
the model's own step after a load (`_initialize_missing_keys`, every stored tensor marked loaded). A *unit* is one
decoder layer (the blocks the family's adapter lists) or one module outside them that owns weights (embeddings, the
final norm, the LM head). `materialize(unit)` reads that unit's tensors from the checkpoint and loads them through
transformers' own loading step (`convert_and_load_state_dict_in_model`: the family's key renaming and weight
conversions, e.g. per-expert weights fused, and its dtype rules), so a materialised unit holds exactly the tensors a
full `from_pretrained` would; `release(unit)` puts the meta tensors back. Tied weights (LM head = embeddings,
Zamba2's shared transformer) are read under the name the checkpoint keeps and bound to every name that uses them.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field

import torch

from analysis.errors import AnalysisError
from analysis.models.stream.files import CheckpointFiles


class PassLock:
    """The re-entrant lock a pass over a skeleton holds (a run, a gradient pass, a save, a materialised unit), which
    also says whether some thread holds it now (`held`): the dashboard's scheduler lets a long job pause inside a
    point only while no pass on a shared streamed model is running (ui.shared.scheduler)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._depth = 0   # changed only by the holder; read by anyone (a racy read of an int is fine here)

    def __enter__(self):
        self._lock.acquire()
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        self._lock.release()

    @property
    def held(self) -> bool:
        return self._depth > 0


@dataclass
class Unit:
    """One decoder layer (`block` is its index) or one module outside the layers that owns weights."""
    name: str                          # module path, e.g. "model.layers.3" or "lm_head"
    block: int | None                  # index among the decoder layers, None for the rest
    slots: list = field(default_factory=list)   # (owner module, attribute, is parameter, meta tensor, full name)
    keys: list[str] = field(default_factory=list)   # checkpoint tensors to read
    plain: dict = field(default_factory=dict)       # checkpoint key -> model name, when no conversion applies
    nbytes: int = 0                    # bytes once materialised at the compute dtype
    stored_bytes: int = 0              # bytes read from disk


def build(config, dtype: torch.dtype):
    """The model class of `config` (a transformers config) on the meta device, non-persistent buffers real."""
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    for name, buf in list(model.named_non_persistent_buffers()):
        parent, _, leaf = name.rpartition(".")
        model.get_submodule(parent).register_buffer(leaf, torch.empty_like(buf, device="cpu"), persistent=False)
    for tensor in model.state_dict(keep_vars=True).values():  # read from the checkpoint: from_pretrained marks
        tensor._is_hf_initialized = True                      # them so, and its init below skips them
    model._initialize_missing_keys(is_quantized=False)  # from_pretrained's own step: only the real buffers get values
    return model.eval()


class Skeleton:
    """The meta model of a checkpoint plus what it takes to materialise any unit of it (from the checkpoint's
    files; a pruned view derives its units from another skeleton instead, analysis.models.stream.pruned)."""

    def __init__(self, model, files: CheckpointFiles | None, decoder_layers, dtype: torch.dtype):
        self.model, self.files, self.dtype = model, files, dtype
        self.layers = list(decoder_layers)
        self.units = self._units()
        self._aliases = self._alias_groups()
        self._slots = {full: (module, attr, is_param, meta) for u in self.units
                       for module, attr, is_param, meta, full in u.slots}
        self._unit_of = {full: u for u in self.units for *_, full in u.slots}
        self.live: set[str] = set()
        self.lock = PassLock()  # one pass at a time: two sessions of the dashboard may share this model
        self.cast: torch.dtype | None = None      # materialise as this dtype (a gradient pass: float32)
        self.grad_names: set | None = None        # parameters that get requires_grad (None: transformers' default)
        self._plain_key: dict[str, str] = {}      # model name -> the checkpoint key that holds it as is
        self.slice_bytes = 0                      # the output head is read in row slices of at most this (plan_rows)
        if files is not None:
            from transformers.conversion_mapping import get_model_conversion_mapping
            from transformers.modeling_utils import LoadStateDictConfig
            self._meta_state = model.state_dict()
            self._load_config = LoadStateDictConfig(dtype=dtype, dtype_plan=model._get_dtype_plan(dtype),
                                                    weight_mapping=get_model_conversion_mapping(model),
                                                    device_map={"": "cpu"})
            self._assign_keys()
        self.plan_rows()

    # ---- structure ----------------------------------------------------------------------------------
    def _units(self) -> list[Unit]:
        names = {id(m): n for n, m in self.model.named_modules(remove_duplicate=False)}
        layer_names = [names[id(layer)] for layer in self.layers]
        units = {n: Unit(n, i) for i, n in enumerate(layer_names)}
        order = list(layer_names)
        for module_name, module in self.model.named_modules(remove_duplicate=False):
            owner = next((n for n in layer_names if module_name == n or module_name.startswith(n + ".")), None)
            tensors = [(a, True, p) for a, p in module._parameters.items() if p is not None]
            tensors += [(a, False, b) for a, b in module._buffers.items()
                        if b is not None and a not in module._non_persistent_buffers_set]
            if not tensors:
                continue
            if owner is None:
                owner = module_name
                if owner not in units:
                    units[owner] = Unit(owner, None)
                    order.append(owner)
            unit = units[owner]
            for attr, is_param, tensor in tensors:
                full = f"{module_name}.{attr}" if module_name else attr
                unit.slots.append((module, attr, is_param, tensor, full))
        for unit in units.values():
            seen = {}
            for *_, tensor, _full in unit.slots:
                seen[id(tensor)] = tensor.numel() * tensor.element_size()
            unit.nbytes = sum(seen.values())
        return [units[n] for n in order]

    def _alias_groups(self) -> dict[str, list[str]]:
        """full name -> every full name bound to the same tensor (tied weights), itself included."""
        by_tensor: dict[int, list[str]] = {}
        for unit in self.units:
            for *_, tensor, full in unit.slots:
                by_tensor.setdefault(id(tensor), []).append(full)
        return {full: names for names in by_tensor.values() for full in names}

    def _assign_keys(self) -> None:
        """Which checkpoint tensors each unit reads: transformers' renaming maps a stored name to the model's."""
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
        mapping = self._load_config.weight_mapping or []
        renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
        converters = [m for m in mapping if isinstance(m, WeightConverter)]
        meta_state = self.model.state_dict()
        unit_of = {full: unit for unit in self.units for *_, full in unit.slots}
        loaded_by: dict[str, str] = {}   # model name -> a checkpoint key that loads it
        converted = set()  # units that need transformers' conversion step (or its dtype plan)
        plan = self._load_config.dtype_plan
        for key in sorted(self.files.entries):
            target, pattern = rename_source_key(key, renamings, converters, self.model.base_model_prefix, meta_state)
            if target not in meta_state and key in meta_state:
                target, pattern = key, None
            unit = unit_of.get(target)
            if unit is None:
                continue  # not a weight of this model (check_tensors refused unexpected ones already)
            loaded_by[target] = key
            unit.keys.append(key)
            if pattern is None and not plan:
                unit.plain[key] = target
            else:
                converted.add(unit.name)
        for unit in self.units:
            if unit.name in converted:
                unit.plain = {}
        self._plain_key = {target: key for unit in self.units for key, target in unit.plain.items()}
        for unit in self.units:
            for *_, full in unit.slots:
                if full in loaded_by:
                    continue
                source = next((loaded_by[a] for a in self._aliases[full] if a in loaded_by), None)
                if source is None:
                    raise AnalysisError(f"No shard of {self.files.path} holds {full} (nor a tensor tied to it); "
                                        "re-save or re-download the model.")
                if source not in unit.keys:
                    unit.keys.append(source)
            unit.stored_bytes = sum(self.files.entries[k].nbytes for k in unit.keys)

    def unit(self, name: str) -> Unit:
        return next(u for u in self.units if u.name == name)

    def unit_holding(self, module) -> Unit:
        """The unit whose weights `module` (the model's own, or one inside it) uses."""
        for unit, layer in zip(self.block_units(), self.layers):
            if any(m is module for m in layer.modules()):
                return unit
        name = next(n for n, m in self.model.named_modules(remove_duplicate=False) if m is module)
        return next(u for u in self.rest_units() if u.name == name or u.name.startswith(name + "."))

    def block_units(self) -> list[Unit]:
        return [u for u in self.units if u.block is not None]

    def rest_units(self) -> list[Unit]:
        return [u for u in self.units if u.block is None]

    # ---- matrices read by rows ------------------------------------------------------------------------
    def row_source(self, unit: Unit):
        """(files, checkpoint key) when `unit` is the model's input embedding or output head — a plain nn.Embedding
        or bias-free nn.Linear whose one tensor is stored as is (under its own or a tied name) — so its rows can be
        read as they are needed; else None (the unit is read whole)."""
        if unit.block is not None or len(unit.slots) != 1 or self.files is None:
            return None
        module, attr, _is_param, meta, full = unit.slots[0]
        if attr != "weight" or meta.dim() != 2 or not _row_readable(module):
            return None
        if not any(module is m for m in _ends(self.model)):
            return None
        key = next((self._plain_key[a] for a in self._aliases[full] if a in self._plain_key), None)
        if key is None or self.files.entries[key].shape != tuple(meta.shape):
            return None
        return self.files, key

    def plan_rows(self) -> None:
        """The output head is read in row slices no larger than the largest unit held whole (a decoder layer, as a
        rule), so it never raises what a pass holds; the input embedding is always read by the rows of its ids."""
        self.slice_bytes = max((u.nbytes for u in self.units if self.row_source(u) is None), default=0)

    def by_rows(self, unit: Unit) -> bool:
        """Is `unit` never held whole in a pass: the input embedding (rows by id), or an output head larger than
        a slice?"""
        if self.row_source(unit) is None:
            return False
        return isinstance(unit.slots[0][0], torch.nn.Embedding) or unit.nbytes > self.slice_bytes

    def held_bytes(self, unit: Unit) -> int:
        """What a pass holds of `unit` at once: all of it, or one slice of a head read by rows (the embedding rows of
        a batch are counted with its hidden states)."""
        if not self.by_rows(unit):
            return unit.nbytes
        return 0 if isinstance(unit.slots[0][0], torch.nn.Embedding) else self.slice_bytes

    def _row_forward(self, unit: Unit):
        """The forward of a unit read by rows: the embedding's rows of the given ids, or the head applied slice by
        slice of its rows (the logits are the same numbers; each slice is released before the next is read)."""
        files, key = self.row_source(unit)
        module, *_, meta, _full = unit.slots[0]

        def dtype():
            return self.cast if self.cast is not None else meta.dtype
        if isinstance(module, torch.nn.Embedding):
            def embed(ids):
                rows = files.gather_rows(key, ids.reshape(-1).cpu())
                return rows.to(dtype()).reshape(*ids.shape, meta.shape[1])
            return embed
        per = max(1, self.slice_bytes // (meta.shape[1] * meta.element_size()))

        def head(x):
            vocab = meta.shape[0]
            slices = range(0, vocab, per)
            if torch.is_grad_enabled() and x.requires_grad:  # the gradient pass: autograd follows the slices
                return torch.cat([torch.nn.functional.linear(x, files.read_rows(key, a, min(a + per, vocab))
                                                             .to(dtype())) for a in slices], dim=-1)
            out = None
            for a in slices:
                part = torch.nn.functional.linear(x, files.read_rows(key, a, min(a + per, vocab)).to(dtype()))
                if out is None:
                    out = part.new_empty(*x.shape[:-1], vocab)
                out[..., a:a + part.shape[-1]] = part
                del part
            return out
        return head

    # ---- materialise / release -------------------------------------------------------------------------
    def materialize(self, unit: Unit) -> None:
        """Give every name of the unit its real tensor (tied names included)."""
        if unit.name in self.live:
            return
        self._load(unit)
        self._bind(unit)
        if self.cast is not None or self.grad_names is not None:
            for module, attr, is_param, _meta, full in unit.slots:
                value = _current(module, attr)
                if self.cast is not None and value.is_floating_point():
                    value = value.detach().to(self.cast)
                wants = None if self.grad_names is None else full in self.grad_names
                _set(module, attr, is_param, value, wants)
        self.live.add(unit.name)

    def _load(self, unit: Unit) -> None:
        """Read the unit's tensors and load them into the model, as from_pretrained would: a tensor stored under the
        model's own name (no conversion, no dtype plan) is cast to its parameter's dtype as transformers'
        `_materialize_copy` does; anything else goes through `convert_and_load_state_dict_in_model` itself."""
        from transformers.core_model_loading import convert_and_load_state_dict_in_model
        if unit.plain and len(unit.plain) == len(unit.keys):
            for key, target in unit.plain.items():
                module, attr, is_param, meta = self._slots[target]
                _set(module, attr, is_param, self.files.read(key)[...].to(device="cpu", dtype=meta.dtype))
            return
        state = {key: self.files.read(key) for key in unit.keys}
        meta = self._meta_state
        self.model.state_dict = lambda *_a, **_k: dict(meta)  # names, shapes, dtypes: the meta model's, read once
        try:
            with _sequential_load():
                info, _ = convert_and_load_state_dict_in_model(self.model, state, self._load_config)
        finally:
            del self.model.state_dict
        del state
        if info.mismatched_keys or info.conversion_errors:
            bad = sorted(str(k[0] if isinstance(k, tuple) else k) for k in
                         [*info.mismatched_keys, *info.conversion_errors])
            raise AnalysisError(f"The weights of {unit.name} in {self.files.path} do not fit its config.json "
                                f"({', '.join(bad[:3])}); re-save the model with save_pretrained.")

    def _bind(self, unit: Unit) -> None:
        """Every name of the unit gets its real tensor (tied names too); names outside live units go back to meta."""
        slots = self._slots
        mine = {full for *_, full in unit.slots}
        for full in mine:
            group = self._aliases[full]
            value = next((_current(*slots[a][:2]) for a in group if not _current(*slots[a][:2]).is_meta), None)
            if value is None:
                raise AnalysisError(f"{full} was not found in the checkpoint; re-save the model.")
            for alias in group:
                module, attr, is_param, meta = slots[alias]
                if alias in mine:
                    _set(module, attr, is_param, value)
                elif self._unit_of[alias].name not in self.live:
                    _set(module, attr, is_param, meta)

    def values(self, unit: Unit) -> dict:
        """{full name: real tensor} of a materialised unit."""
        return {full: _current(module, attr) for module, attr, _p, _m, full in unit.slots}

    def set_values(self, unit: Unit, values: dict) -> None:
        """Load {full name: tensor} into the unit's slots (a derived view's own loading step), shapes checked."""
        for module, attr, is_param, meta, full in unit.slots:
            value = values[full]
            if tuple(value.shape) != tuple(meta.shape):
                raise AnalysisError(f"{full} came out {list(value.shape)} instead of {list(meta.shape)}; this is a "
                                    "bug in the pruned view.")
            _set(module, attr, is_param, value.to(meta.dtype))

    def release(self, unit: Unit) -> None:
        for module, attr, is_param, meta, _full in unit.slots:
            _set(module, attr, is_param, meta)
        self.live.discard(unit.name)

    @contextlib.contextmanager
    def materialized(self, unit: Unit):
        with self.lock:
            self.materialize(unit)
            try:
                yield
            finally:
                self.release(unit)

    @contextlib.contextmanager
    def rest_on_demand(self, keep: bool = False):
        """While inside, every module outside the decoder layers that owns weights gets them just before it runs
        (the embeddings in a capture, the final norm and LM head in a tail) and gives them back right after, or,
        with `keep`, when the block ends (several forwards in a row read them once)."""
        hooks, replaced = [], []
        for unit in self.rest_units():
            module = self.model.get_submodule(unit.name)
            if self.by_rows(unit):  # never held whole: its forward reads the rows it needs
                module.forward = self._row_forward(unit)
                replaced.append(module)
                continue
            hooks.append(module.register_forward_pre_hook(lambda _m, _a, u=unit: self.materialize(u)))
            if not keep:
                hooks.append(module.register_forward_hook(lambda _m, _a, _o, u=unit: self.release(u)))
        try:
            yield
        finally:
            for h in hooks:
                h.remove()
            for module in replaced:
                del module.forward
            for unit in self.rest_units():
                self.release(unit)


def _row_readable(module) -> bool:
    """A module whose forward is its weight's rows (an embedding without max_norm) or x·Wᵀ (a linear without bias):
    exactly these types, so no subclass's forward is replaced."""
    if type(module) is torch.nn.Embedding:
        return module.max_norm is None
    return type(module) is torch.nn.Linear and module.bias is None


def _ends(model) -> list:
    """The model's input embedding and output head, where it names them."""
    out = []
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        try:
            module = getattr(model, getter)()
        except (AttributeError, NotImplementedError):
            module = None
        if module is not None:
            out.append(module)
    return out


def _current(module, attr):
    return module._parameters[attr] if attr in module._parameters else module._buffers[attr]


def _set(module, attr, is_param, value, requires_grad: bool | None = None) -> None:
    if is_param:
        if requires_grad is not None:
            value = torch.nn.Parameter(value.detach(), requires_grad=requires_grad)
        elif not isinstance(value, torch.nn.Parameter):
            value = torch.nn.Parameter(value, requires_grad=value.is_floating_point())
        module._parameters[attr] = value
    else:
        module._buffers[attr] = value


@contextlib.contextmanager
def _sequential_load():
    """transformers loads with a thread pool unless told not to; one unit is small, and the host's cores are busy."""
    key = "HF_DEACTIVATE_ASYNC_LOAD"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before
