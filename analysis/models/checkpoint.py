"""Check a checkpoint directory before loading it: its config's values, its safetensors headers, and that
the tensors it holds are exactly the ones the config's model has (transformers would silently
random-initialise missing ones and ignore unexpected ones: wrong results with exit code 0).
"""
from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import torch

from analysis.errors import AnalysisError
from analysis.io import reads

MAX_HEADER_BYTES = 100_000_000  # safetensors itself refuses larger headers; checked before one byte is read

# config fields of every family that must be whole numbers ≥ 1 when present (None: the library's default); each
# adapter adds its own (Adapter.positive_config_fields)
POSITIVE_FIELDS = ("num_hidden_layers", "hidden_size", "vocab_size", "intermediate_size")


def validate_config(config, path: Path, supported=None) -> dict:
    """The config as a dict, or one sentence saying which value is wrong.

    `supported` (model types) defaults to every type of the family registry (analysis.archs)."""
    from analysis.archs import FAMILIES, PRUNED_PREFIX, get_adapter, supported_model_types
    where = path / "config.json"
    if not isinstance(config, dict):
        raise AnalysisError(f"{where} holds a JSON {type(config).__name__}, not an object of settings; "
                            "re-save the model with save_pretrained.")
    model_type = config.get("model_type")
    supported = supported_model_types() if supported is None else list(supported)
    from analysis.archs import check_not_refused
    check_not_refused(model_type, f" in {where}")
    if isinstance(model_type, str) and model_type.startswith(PRUNED_PREFIX) and model_type not in supported:
        from analysis.archs.base import how_to_load   # another version's prune, or an unknown family's
        raise AnalysisError(f"{where} names {model_type!r}, which this version of the dashboard does not have; "
                            + how_to_load(model_type))
    if not isinstance(model_type, str) or model_type not in supported:
        families = "; ".join(f"{family} ({', '.join(get_adapter(family).own_types)})" for family in FAMILIES)
        raise AnalysisError(f"Architecture {model_type!r} in {where} is not supported: no family adapter handles "
                            f"it; supported families (model types, plus the project's {PRUNED_PREFIX} types): "
                            f"{families}.")
    from analysis.archs import adapter_for
    adapter = adapter_for(config)
    config = adapter.complete_config(config)
    if (refusal := adapter.config_refusal(config, str(where))) is not None:
        raise AnalysisError(refusal)
    for name in (*POSITIVE_FIELDS, *adapter.positive_config_fields):
        value = config.get(name)
        if value is None and name != "num_hidden_layers":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise AnalysisError(f"{name} in {where} must be a whole number ≥ 1, not {value!r}; "
                                "fix the config or re-save the model.")
    for key in (adapter.key_dims_config_key, "readout_key_dims"):  # the pruned types' per-layer lists
        dims = config.get(key)
        if dims is not None and not (isinstance(dims, list) and 1 <= len(dims) <= config["num_hidden_layers"]
                                     and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)):
            raise AnalysisError(f"{key} in {where} must list one whole key dim ≥ 1 per linear-attention layer "
                                f"(at most {config['num_hidden_layers']}), not {str(dims)[:80]}; re-save the model.")
    return config


def header_entries(file: Path) -> tuple[dict, int]:
    """({tensor name: {"dtype", "shape", "data_offsets"}}, first data byte) of a safetensors file;
    corrupt, truncated or unreadable files are one sentence (a streamed load reads each tensor at its offsets later)."""
    hint = "re-save or re-download the model"
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO must not hang
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if not stat.S_ISREG(info.st_mode):
                raise AnalysisError(f"{file} is not a regular file (it is {reads.kind_of(info.st_mode)}); {hint}.")
            size = info.st_size
            header_len = int.from_bytes(fh.read(8), "little")
            if header_len > MAX_HEADER_BYTES:
                raise AnalysisError(f"{file} declares a {header_len:,}-byte safetensors header, more than the "
                                    f"{MAX_HEADER_BYTES:,} safetensors allows; it is not a valid model file, so "
                                    f"{hint}.")
            if header_len <= 0 or 8 + header_len > size:
                raise ValueError("header length does not fit the file")
            header = reads.loads(fh.read(header_len), f"The safetensors header of {file}", hint)
        if not isinstance(header, dict):
            raise ValueError(f"the header is a JSON {type(header).__name__}, not an object")
        tensors = {k: t for k, t in header.items() if k != "__metadata__"}
        end = max((t["data_offsets"][1] for t in tensors.values()), default=0)
        if 8 + header_len + end != size:
            raise ValueError(f"tensor data ends at byte {8 + header_len + end} but the file has {size}")
        for t in tensors.values():
            first, last = (int(x) for x in t["data_offsets"])
            shape = [int(n) for n in t["shape"]]
            if not (0 <= first <= last <= end) or any(n < 0 for n in shape) or not isinstance(t["dtype"], str):
                raise ValueError("a tensor's offsets or shape are out of range")
        return tensors, 8 + header_len
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, json.JSONDecodeError,
            UnicodeDecodeError) as exc:
        raise AnalysisError(f"{file} is corrupt or truncated ({exc}); re-save or re-download the model.") from None
    except OSError as exc:
        raise AnalysisError(f"{file} cannot be read ({exc.strerror or exc}); check that it is a readable "
                            "safetensors file (not a broken link or a folder).") from None


def expected_tensors(config: dict, where: Path) -> tuple[dict, set]:
    """({required name: shape}, names that may also be present) for the model the config describes.

    Built on the meta device, so nothing is allocated. Tied weights (lm_head = embeddings) are required
    once and may appear twice.
    """
    from analysis.archs.install import ready
    ready()  # the CPU path for fla's ops and the project's model types
    from transformers import AutoConfig, AutoModelForCausalLM

    from analysis.archs import adapter_for
    adapter_for(config).install_routing()  # some families' layers cannot even be built without it
    try:
        cfg = AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
    except Exception as exc:  # fla's constructors assert on impossible shapes
        reason = str(exc).splitlines()[0][:120] if str(exc) else "inconsistent sizes"
        raise AnalysisError(f"{where / 'config.json'} describes a model that cannot be built "
                            f"({type(exc).__name__}: {reason}); fix its sizes or re-save the model.") from None
    required = dict(model.named_parameters())
    required.update({n: b for n, b in model.named_buffers()
                     if n.rsplit(".", 1)[-1] not in getattr(_owner(model, n), "_non_persistent_buffers_set", set())})
    allowed = set(_as_saved(model, dict(model.state_dict())))
    return {n: tuple(t.shape) for n, t in _as_saved(model, required).items()}, allowed


def _as_saved(model, tensors: dict) -> dict:
    """The names and shapes save_pretrained writes: transformers reverts a family's checkpoint conversion on save
    (Kimi Linear: the hub layout's q/k/v convs, per-expert w1/w2/w3, self_attn.f_a_proj ...), on meta tensors too."""
    from transformers.core_model_loading import revert_weight_conversion
    return revert_weight_conversion(model, tensors)


def _owner(model, name: str):
    module = model
    for part in name.split(".")[:-1]:
        module = getattr(module, part)
    return module


def check_tensors(path: Path, config: dict, headers: dict) -> None:
    """Refuse missing, unexpected or wrongly shaped tensors with one sentence that names them."""
    required, allowed = expected_tensors(config, path)
    missing = sorted(set(required) - set(headers))
    unexpected = sorted(set(headers) - allowed - set(required))
    wrong = sorted(n for n in set(headers) & set(required) if tuple(headers[n]) != required[n])
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensor{'s' if len(missing) > 1 else ''} missing ({_names(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected ({_names(unexpected)})")
    if wrong:
        problems.append(f"{len(wrong)} with a shape other than config.json implies ("
                        + _names([f"{n} {list(headers[n])} instead of {list(required[n])}" for n in wrong]) + ")")
    if problems:
        raise AnalysisError(f"The weights in {path} do not match its config.json: {'; '.join(problems)}; "
                            "re-save the model with save_pretrained instead of loading it half random.")


def _names(names: list[str], shown: int = 4) -> str:
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f" and {len(names) - shown} more"
