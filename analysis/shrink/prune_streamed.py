"""A prune of a streamed model: the pruned model as a streamed view of the original checkpoint, never held whole.

Each unit of the pruned model is the same unit of the original, read from its checkpoint, with the tensors a prune
changes (q/k rows of a channel prune, head blocks of a head prune) edited by the very functions an in-memory prune
applies to its state dict (analysis.shrink.prune.rebuilt); every other tensor passes through untouched. Measuring it
streams it; saving it writes it one unit at a time, sharded like the original (analysis.models.stream.save), so the
saved tensors are byte for byte those of an in-memory prune.
"""
from __future__ import annotations

import copy

import torch

from analysis.archs import adapter_for
from analysis.models.stream.derived import DerivedSkeleton
from analysis.models.stream.model import StreamedModel
from analysis.models.stream.skeleton import build


def pruned_view(model: StreamedModel, architecture, edits: dict) -> StreamedModel:
    """The streamed model whose architecture is `architecture(model)` (the adapter's pruned model; built here on the
    meta device, only its config is kept) and whose tensors are the original's, each named in `edits` ({full name:
    function of the tensor}) changed by its function."""
    source = model.skeleton
    with torch.device("meta"):
        config = copy.deepcopy(architecture(source.model).config)
    pruned = build(config, source.dtype)

    def transform(_unit: str, values: dict) -> dict:
        return {name: (edits[name](value.detach()) if name in edits else value) for name, value in values.items()}

    skeleton = DerivedSkeleton(pruned, source, adapter_for(model).decoder_layers(pruned), source.dtype, transform,
                               set(edits))
    view = StreamedModel(skeleton, model.device, model.limit, torch.zeros(1, 1, dtype=torch.long))
    view.on_block = model.on_block
    return view
