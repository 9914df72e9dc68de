"""A prune of a streamed model: the pruned model as a streamed view of the original checkpoint, never held whole.

Each unit of the pruned model is the same unit of the original, read from its checkpoint, with the kept q/k rows
sliced out by the very function an in-memory prune uses (analysis.shrink.prune.reduce_param); every other tensor
passes through untouched. Measuring it streams it; saving it writes it one unit at a time, sharded like the
original (analysis.models.stream.save), so the saved tensors are byte for byte those of an in-memory prune.
"""
from __future__ import annotations

import copy

import torch

from analysis.archs import adapter_for
from analysis.models.load import linear_layers
from analysis.models.stream.derived import DerivedSkeleton
from analysis.models.stream.model import StreamedModel
from analysis.models.stream.skeleton import build


def pruned_view(model: StreamedModel, selections, readout, reduce_param) -> StreamedModel:
    """The streamed pruned model keeping `selections` (one per linear layer); `readout`: per-layer readout key dims
    (None: the family's default dk'^-1/2); `reduce_param`: analysis.shrink.prune's, passed in (prune imports this
    module)."""
    adapter = adapter_for(model)
    source = model.skeleton
    dims = [s.kept for s in selections]
    with torch.device("meta"):  # the adapter builds the pruned architecture; only its config is kept
        config = copy.deepcopy(adapter.pruned_model(source.model, dims, readout).config)
    pruned = build(config, source.dtype)
    names = {id(m): n for n, m in source.model.named_modules(remove_duplicate=False)}
    rows = {}   # full parameter name -> (ChannelRows entries, layer, selection)
    for layer, sel in zip(linear_layers(model), selections):
        prefix = names[id(layer.module)] + "."
        for entry in adapter.channel_rows(layer.module):
            rows.setdefault(prefix + entry.param, ([], layer, sel))[0].append(entry)

    def transform(_unit: str, values: dict) -> dict:
        return {name: (reduce_param(value.detach(), *rows[name]) if name in rows else value)
                for name, value in values.items()}

    skeleton = DerivedSkeleton(pruned, source, adapter.decoder_layers(pruned), source.dtype, transform, set(rows))
    view = StreamedModel(skeleton, model.device, model.limit, torch.zeros(1, 1, dtype=torch.long))
    view.on_block = model.on_block
    return view
