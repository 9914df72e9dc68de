"""Structured pruning of query/key channels: plan per-layer key dims, build a NEW smaller model, save it.

The same index set slices every row block the family's adapter names (`channel_rows`: the query and key
projections, their short-convolution channels, per-channel decay rows), so q·k products over the kept channels are unchanged before the in-kernel l2 norm (which then renormalises
over the survivors). By default the pruned model keeps each layer's original readout scale dk^-1/2, so it
equals the original model with the dropped channels zeroed (pure channel removal, see
analysis.archs.fla_shared.pruned); rescale="default" keeps fla's dk'^-1/2 instead, as the reference code does.
The input model is never modified.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch

from analysis.defaults import RESCALES  # defined there: the CLI's --help stays torch-free
from analysis.archs import adapter_for
from analysis.errors import AnalysisError
from analysis.models.forward import is_streamed
from analysis.models.channel_group import channel_groups
from analysis.models.key_plan import key_dims
from analysis.shrink.strategies import STRATEGIES, Selection, get_strategy

@dataclass
class PruneResult:
    model: object
    strategy: str
    dims: list[int]
    original_dims: list[int]
    selections: list[Selection]
    info: dict = field(default_factory=dict)


def check_rescale(rescale: str) -> str:
    if rescale not in RESCALES:
        raise AnalysisError(f"Readout scale must be one of {', '.join(RESCALES)}, got {rescale!r}.")
    return rescale


def strategy_problem(model, strategy) -> str | None:
    """Why `strategy` cannot prune this model, in one sentence, or None: a strategy that mixes key channels (PCA)
    cannot be used where each key channel has its own decay (KDA, Kimi, GLA, RWKV-7)."""
    adapter = adapter_for(model)
    if strategy.axis_aligned or adapter.rotations:
        return None
    return (f"The {strategy.label} strategy mixes key channels, which {adapter.label} cannot take (each key channel "
            "has its own decay); pick an axis-aligned strategy such as l1, wanda or drrqr.")


def usable_strategies(model) -> tuple[list[str], list[str]]:
    """(usable, unusable) strategy names for this model: the rule prune() enforces (`strategy_problem`)."""
    usable = [name for name, s in STRATEGIES.items() if strategy_problem(model, s) is None]
    return usable, [name for name in STRATEGIES if name not in usable]


def prune(model, strategy: str, dims: list[int], calibration=None, seed: int = 0,
          rescale: str = "original") -> PruneResult:
    """A new model keeping `dims[l]` channels per head in layer l, chosen by `strategy`."""
    check_rescale(rescale)
    strat = get_strategy(strategy)
    selections = choose_channels(model, strategy, dims, calibration, seed)
    pruned = build_pruned(model, selections, rescale)
    return PruneResult(model=pruned, strategy=strategy, dims=list(dims),
                       original_dims=key_dims(model), selections=selections,
                       info=prune_info(pruned, strat, rescale, selections))


def prune_info(pruned, strat, rescale: str, selections: list[Selection]) -> dict:
    """What a prune did, for pruning.json and the CLI's JSON (the one builder; a head prune adds "heads").
    strat: the channel strategy, or None when no key channel was removed."""
    return {"label": strat.label if strat is not None else "no key channels removed",
            "axis_aligned": strat.axis_aligned if strat is not None else True, "rescale": rescale,
            "readout_key_dims": getattr(pruned.config, "readout_key_dims", None),
            "details": [s.details for s in selections if s.details]}


def choose_channels(model, strategy: str, dims: list[int], calibration=None, seed: int = 0) -> list[Selection]:
    """The channels `strategy` keeps per layer for key dims `dims` (checked: they fit, the family takes the
    strategy, calibration is there when needed)."""
    strat = get_strategy(strategy)
    original = key_dims(model)
    if len(dims) != len(original) or any(not 1 <= d <= o for d, o in zip(dims, original)):
        raise AnalysisError(f"Key dims {dims} do not fit the model's {original}; plan them with plan_key_dims.")
    problem = strategy_problem(model, strat)
    if problem:
        raise AnalysisError(problem)
    if strat.needs_calibration and calibration is None:
        raise AnalysisError(f"The {strat.label} strategy needs calibration data; run calibrate() first.")
    return strat.select(model, calibration, dims, seed=seed)


def build_pruned(model, selections: list[Selection], rescale: str = "original"):
    """Instantiate the pruned architecture (the adapter's) and load the sliced (or PCA-projected) weights, strictly.

    rescale="original" keeps the input model's effective readout scale per layer (its own, or the one it
    kept from an earlier prune); "default" lets the family read out at dk'^-1/2. Only the rows the adapter
    names change: every other tensor, a hybrid's softmax blocks included, is copied bit for bit.
    """
    check_rescale(rescale)
    adapter = adapter_for(model)
    layers = channel_groups(model)
    dims = [s.kept for s in selections]
    if len(selections) != len(layers):
        raise AnalysisError(f"Got {len(selections)} selections for {len(layers)} linear-attention layers.")
    adapter.check_key_dims(dims, next(model.parameters()).device.type)  # e.g. KDA's GPU minimum
    readout = adapter.readout_key_dims(model) if rescale == "original" else None
    return rebuilt(model, lambda m: adapter.pruned_model(m, dims, readout), channel_edits(model, selections))


def channel_edits(model, selections: list[Selection]) -> dict:
    """{full parameter name: function of the tensor} reducing each layer's q/k (and decay) rows to its selection
    (`model` may live on the meta device: only its layout is read)."""
    module_names = {id(m): n for n, m in model.named_modules()}
    edits = {}
    for layer, sel in zip(channel_groups(model), selections):
        if keeps_every_channel(sel, layer.key_dim):  # its tensors are copied bit for bit (a streamed view then
            continue                                  # knows this layer is unchanged: analysis.models.stream.reuse)
        prefix = module_names[id(layer.module)] + "."
        by_param: dict[str, list] = {}
        for rows in layer.rows:
            by_param.setdefault(rows.param, []).append(rows)
        for param, entries in by_param.items():
            edits[prefix + param] = partial(reduce_param, entries=entries, layer=layer, sel=sel)
    return edits


def keeps_every_channel(sel: Selection, key_dim: int) -> bool:
    """Does `sel` keep every channel in its order (the edit of its rows would be the identity)?"""
    if sel.indices is None or sel.indices.shape[-1] != key_dim:
        return False
    return bool((sel.indices == torch.arange(key_dim, device=sel.indices.device)).all())


def rebuilt(model, architecture, edits: dict):
    """A NEW model: `architecture(model)` (the adapter's pruned model) loaded strictly with the model's tensors, each
    one named in `edits` ({full name: function of the tensor}) changed by its function, every other one copied bit
    for bit. A streamed model is never held whole: the result is a streamed view that edits each unit as it is read
    (analysis.shrink.prune_streamed), with the same functions."""
    if is_streamed(model):
        from analysis.shrink.prune_streamed import pruned_view
        return pruned_view(model, architecture, edits)
    new = architecture(model)
    state = dict(model.state_dict())  # load_state_dict copies into the new tensors: no clone needed
    for name, edit in edits.items():
        if name in state:
            state[name] = edit(state[name])
    new.load_state_dict(state, strict=True)
    return new


def reduce_param(tensor: torch.Tensor, entries: list, layer, sel: Selection) -> torch.Tensor:
    """One parameter of a pruned layer: its q/k (and gate) rows the entries name, reduced to the selection."""
    if entries[0].heads_first:   # [heads, dk, ...]: slice its flattened head-major rows, then re-split
        return reduce_rows(tensor.flatten(0, 1), entries, layer, sel).unflatten(0, (tensor.shape[0], -1))
    return reduce_rows(tensor, entries, layer, sel)


def reduce_rows(tensor: torch.Tensor, entries: list, layer, sel: Selection) -> torch.Tensor:
    """Keep the selected channels (or their PCA projection) of every dk-row head block the entries name
    (layer: its ChannelGroup, which says where the blocks are)."""
    dk = layer.key_dim
    pieces = []  # (first row, past-the-end row, replacement rows)
    for rows in entries:
        if rows.role == "gate" and sel.indices is None:
            raise AnalysisError("Per-channel decay rows cannot follow a rotation (PCA); use an axis-aligned strategy.")
        chosen = layer.per_block(rows, sel.indices if sel.indices is not None else sel.projection)
        starts = layer.head_starts(rows)
        per_head = tensor[layer.head_index(rows, tensor.device)]           # [H, dk, ...]
        if sel.indices is not None:
            picked = chosen.to(tensor.device).reshape(len(starts), -1, *([1] * (tensor.dim() - 1)))
            out = per_head.gather(1, picked.expand(-1, -1, *per_head.shape[2:]))
        else:
            T = chosen.to(tensor.device, torch.float32)                      # [H, k, dk]
            mix = T.square() if rows.conv else T                             # conv: squared-loading approximation
            out = torch.einsum("hkd,hd...->hk...", mix, per_head.float()).to(tensor.dtype)
        pieces += [(s, s + dk, out[h]) for h, s in enumerate(starts)]
    pieces.sort(key=lambda p: p[0])
    parts, at = [], 0
    for first, end, replacement in pieces:
        if first < at:
            raise AnalysisError("The adapter names overlapping q/k row blocks; this is a bug in its channel_rows.")
        parts += [tensor[at:first], replacement]
        at = end
    parts.append(tensor[at:])
    return torch.cat(parts).contiguous()


NO_READOUT_SCALE = "no key-dim readout scale in this family (pure channel removal either way)"


def readout_label(model, rescale: str) -> str:
    """How the pruned model reads out, in words (RESCALES), or that the family has no readout scale at all."""
    return RESCALES[rescale] if adapter_for(model).readout_scaled else NO_READOUT_SCALE
