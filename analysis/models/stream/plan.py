"""When a model is streamed, and the line that says so.

A model whose weights fit what the request may hold (its `--max-memory` budget, by default half of the memory
available) loads whole, as always. One that does not is streamed when its checkpoint really holds those weights on
disk (a config claiming 100,000 layers over a two-layer file is refused as too big, not streamed: its files hold
less than half of the weights it describes) and the largest unit it holds whole — a decoder layer, or a module
outside them; the input embedding is read by the rows of its ids and a large output head in row slices — fits the
budget on its own; otherwise one sentence names that unit and its size. Streaming runs on the CPU.
"""
from __future__ import annotations

import torch

from analysis.errors import AnalysisError
from analysis.models import budget, limits
from analysis.models.stream.files import CheckpointFiles


def streamable(files: CheckpointFiles, params: int, device: torch.device) -> bool:
    """The files hold at least half the config's parameters (a tensor or two missing is said as missing, later), and
    the device is the CPU."""
    stored = sum(torch.Size(e.shape).numel() for e in files.entries.values())
    return device.type == "cpu" and 2 * stored >= params


def open_streamed(path, config: dict, files: CheckpointFiles, adapter, dtype: torch.dtype, device: torch.device):
    """The StreamedModel of a checkpoint over the budget (`config`: its checked config.json, models.load.read_config);
    one sentence when even its largest unit is over it."""
    from transformers import AutoConfig

    from analysis.models.stream.model import StreamedModel
    from analysis.models.stream.skeleton import Skeleton, build
    skeleton_model = build(AutoConfig.for_model(**config), dtype)  # the checked JSON, as limits reads it
    skeleton = Skeleton(skeleton_model, files, adapter.decoder_layers(skeleton_model), dtype)
    limit, how = limits.allowed(device)
    largest = max(skeleton.units, key=skeleton.held_bytes)   # the embedding and a big head are read by rows
    held = skeleton.held_bytes(largest)
    params = sum(p.numel() for p in skeleton.model.parameters())
    element = torch.empty((), dtype=dtype).element_size()
    if held > limit:
        kind = "block" if largest.block is not None else "part"
        raise AnalysisError(f"The model in {path} ({params:,} parameters in {_dtype(dtype)}) needs about "
                            f"{limits.size_text(params * element)} of memory, more than {how}, and streamed one "
                            f"block at a time it still holds its largest {kind} ({largest.name}, "
                            f"{limits.size_text(held)} in {_dtype(dtype)}), which does not fit either; "
                            f"{_advice(dtype, limit, held)}.")
    from analysis.runtime.allocator import return_freed_memory
    return_freed_memory()  # a released block's memory goes back to the system, not to the heap
    model = StreamedModel(skeleton, device, limit, torch.zeros(1, 1, dtype=torch.long))
    model.analysis_streaming = message(model, files, limit)
    return model


def message(model, files: CheckpointFiles, limit: float) -> str:
    """`streaming: one block at a time (8 blocks, 31.2 GB on disk, largest block 1.9 GB), budget 4.0 GiB`."""
    blocks = model.skeleton.block_units()
    largest = max(u.nbytes for u in blocks)
    chosen = budget.current()
    said = budget.size_text(limit) + ("" if chosen is not None else " (half of the memory available)")
    return (f"streaming: one block at a time ({len(blocks)} blocks, {limits.size_text(files.total_bytes)} on disk, "
            f"largest block {limits.size_text(largest)}), budget {said}")


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _advice(dtype: torch.dtype, limit: float, need: float) -> str:
    raise_it = f"raise --max-memory above {budget.size_text(need * 1.25)}"
    if torch.empty((), dtype=dtype).element_size() > 2:
        return f"load it in bfloat16 (--dtype bfloat16, half the bytes) or on a GPU (--device cuda), or {raise_it}"
    return f"load it on a GPU (--device cuda), or {raise_it}"
