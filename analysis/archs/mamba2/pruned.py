"""pruned_<type>: a Mamba-2 family's own classes with one state size N per Mamba-2 layer (`ssm_state_sizes`).

The family's config holds one N for every layer, so a per-layer prune is saved as this registered type: the base
model is built at the config's N, then each Mamba-2 mixer's `in_proj` and `conv1d` are rebuilt for its own N (the
weights are loaded afterwards). Falcon-H1's non-persistent `mup_vector` is rebuilt per layer from the config's
multipliers at that layer's N. Caches for generation are sized by transformers from the config's single N, so
decoding with a cache is not supported for per-layer N (forwards without a cache are).
"""
from __future__ import annotations

import copy
import sys

import torch
import torch.nn as nn

from analysis.archs.heads import apply_head_counts
from analysis.archs.mamba2.layout import STATE_SIZE_KEYS, is_mamba2_mixer, layers_of, mixers_in
from analysis.archs.pruned_types import make_pruned_type

KEY = "ssm_state_sizes"



def _mixers(model) -> list[nn.Module]:
    return [m for layer in layers_of(model) for m in mixers_in(layer) if is_mamba2_mixer(m)]


def _mup_vector(mixer, config, state_size: int):
    """Falcon-H1's per-section multipliers for a projection at `state_size` and the mixer's own head and group
    counts (None for other families)."""
    compute = getattr(sys.modules[type(mixer).__module__], "compute_mup_vector", None)
    if compute is None or not hasattr(mixer, "mup_vector"):
        return None
    config = copy.copy(config)
    config.mamba_d_state = state_size
    config.mamba_d_ssm, config.mamba_n_heads, config.mamba_n_groups = \
        mixer.intermediate_size, mixer.num_heads, mixer.n_groups
    return compute(config)


def set_state_size(mixer: nn.Module, state_size: int, config) -> None:
    """Rebuild one mixer's in_proj and conv1d for `state_size` channels of B and C per group."""
    conv_dim = mixer.intermediate_size + 2 * mixer.n_groups * state_size
    old = mixer.in_proj
    mixer.in_proj = nn.Linear(old.in_features, old.out_features - mixer.conv_dim + conv_dim, bias=old.bias is not None,
                              device=old.weight.device, dtype=old.weight.dtype)
    conv = mixer.conv1d
    mixer.conv1d = nn.Conv1d(conv_dim, conv_dim, kernel_size=conv.kernel_size[0], groups=conv_dim,
                             padding=conv.padding[0], bias=conv.bias is not None,
                             device=conv.weight.device, dtype=conv.weight.dtype)
    mixer.ssm_state_size, mixer.conv_dim = state_size, conv_dim
    if hasattr(mixer, "groups_time_state_size"):   # Falcon-H1
        mixer.groups_time_state_size = mixer.n_groups * state_size
    mup = _mup_vector(mixer, config, state_size)
    if mup is not None:
        mixer.register_buffer("mup_vector", mup.to(mixer.mup_vector.device), persistent=False)


def _apply_state_sizes(model) -> None:
    apply_head_counts(model)   # heads first: set_state_size sizes B/C for the kept groups
    dims, mixers = getattr(model.config, KEY, None), _mixers(model)
    if dims is None:
        dims = [m.ssm_state_size for m in mixers]
    if len(dims) != len(mixers):
        raise ValueError(f"{KEY} has {len(dims)} entries for {len(mixers)} Mamba-2 layers")
    for mixer, n in zip(mixers, dims):
        if int(n) != mixer.ssm_state_size:
            set_state_size(mixer, int(n), model.config)
        else:  # Falcon-H1's multipliers follow the head counts too
            mup = _mup_vector(mixer, model.config, int(n))
            if mup is not None:
                mixer.register_buffer("mup_vector", mup.to(mixer.mup_vector.device), persistent=False)


PRUNED_TYPES: dict[str, tuple[type, type]] = {}


def rebuild_mup_vectors(model, in_place: bool = False) -> None:
    """Falcon-H1's non-persistent `mup_vector` of every Mamba-2 mixer, from the config's multipliers at that mixer's
    own state size, heads and groups (no-op for other families). Shipped verbatim in a saved prune's modeling file,
    so it imports nothing of the project (the same rule as `_mup_vector`)."""
    import copy
    import sys
    for mixer in model.modules():
        compute = getattr(sys.modules[type(mixer).__module__], "compute_mup_vector", None)
        if compute is None or not hasattr(mixer, "mup_vector") or not hasattr(mixer, "ssm_state_size"):
            continue
        config = copy.copy(model.config)
        config.mamba_d_state = mixer.ssm_state_size
        config.mamba_d_ssm, config.mamba_n_heads, config.mamba_n_groups = \
            mixer.intermediate_size, mixer.num_heads, mixer.n_groups
        mup = compute(config).to(mixer.mup_vector.device)
        if in_place:
            mixer.mup_vector.copy_(mup)
        else:
            mixer.register_buffer("mup_vector", mup, persistent=False)


SHIPPED_MEMBERS = """
    def _initialize_missing_keys(self, *args, **kwargs):
        super()._initialize_missing_keys(*args, **kwargs)
        with torch.no_grad():   # transformers fills mup_vector from the config's single N: rebuild per layer
            rebuild_mup_vectors(self, in_place=True)
"""


def shipped_parts(model):
    """What a saved prune's modeling file needs beyond sizes: Falcon-H1's per-layer multipliers (else None)."""
    if not any(hasattr(m, "mup_vector") for m in _mixers(model)):
        return None
    import inspect

    from analysis.archs.shipped_code import ShippedParts
    return ShippedParts(source=inspect.getsource(rebuild_mup_vectors), after_init="rebuild_mup_vectors(self)",
                        members=SHIPPED_MEMBERS)


def _rebuild_mup_vectors_after_load(base_model: type) -> dict:
    def _initialize_missing_keys(self, *args, **kwargs):
        """After transformers' own init on load, which fills Falcon-H1's non-persistent mup_vector from the config's
        single N (or leaves it empty at another N), rebuild each layer's from its own N."""
        base_model._initialize_missing_keys(self, *args, **kwargs)
        with torch.no_grad():
            for m in _mixers(self):
                mup = _mup_vector(m, self.config, m.ssm_state_size)
                if mup is not None:
                    m.mup_vector.copy_(mup)
    return {"_initialize_missing_keys": _initialize_missing_keys}


def register() -> None:
    """Register pruned_<type> for every Mamba-2 family this transformers has (idempotent; after `mamba2` is
    transformers' own type again: fla's import maps it to fla's classes)."""
    for base in STATE_SIZE_KEYS:
        if base in PRUNED_TYPES:
            continue
        try:
            PRUNED_TYPES[base] = make_pruned_type(base, _apply_state_sizes, _rebuild_mup_vectors_after_load)
        except (KeyError, ImportError, AttributeError):   # an older transformers without this family
            continue
