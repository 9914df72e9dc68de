"""`save_pretrained` of a streamed model: config, generation config and safetensors, one unit at a time.

The tensors are those transformers' `save_pretrained` would write for the same model held whole: its state dict
with tied duplicates removed (`remove_tied_weights_from_state_dict`) and the family's checkpoint conversion
reverted (`revert_weight_conversion`), unit by unit. Names, dtypes and shapes are planned on the meta skeleton
first, so every file's header is written before its data (analysis.io.shards). The save is sharded like the
checkpoint it was read from: one `model.safetensors` for a single file, shards no larger than the input's largest
(with their index) for a sharded one.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

from analysis.io.shards import Planned, ShardWriter


def _kept_names(skeleton) -> list[str]:
    """Model names save_pretrained keeps (tied duplicates and ignored keys dropped), on meta tensors."""
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    state = skeleton.model.state_dict()
    for key in getattr(skeleton.model, "_keys_to_ignore_on_save", None) or []:
        state.pop(key, None)
    return list(remove_tied_weights_from_state_dict(state, skeleton.model))


def _reverted(model, tensors: dict) -> dict:
    from transformers.core_model_loading import revert_weight_conversion
    return revert_weight_conversion(model, tensors)


def plan(skeleton) -> list[tuple[object, dict, list[Planned]]]:
    """Per unit (in order): the unit, {model name: meta tensor} it contributes, and the saved tensors it becomes."""
    kept = set(_kept_names(skeleton))
    meta = skeleton.model.state_dict()
    out = []
    for unit in skeleton.units:
        names = {full: meta[full] for *_, full in unit.slots if full in kept}
        saved = _reverted(skeleton.model, dict(names))
        out.append((unit, names, [Planned(n, str(t.dtype).removeprefix("torch."), tuple(t.shape),
                                          t.numel() * t.element_size()) for n, t in saved.items()]))
    return out


def save_streamed(model, folder) -> None:
    """Write the streamed model into `folder` (a temporary folder of analysis.io.writes.write_model_dir)."""
    skeleton = model.skeleton
    folder = Path(folder)
    config = copy.deepcopy(skeleton.model.config)
    config.architectures = [type(skeleton.model).__name__]  # as save_pretrained records it
    config.save_pretrained(folder)
    generation = getattr(skeleton.model, "generation_config", None)
    if generation is not None and skeleton.model.can_generate():
        generation.save_pretrained(folder)
    units = plan(skeleton)
    files = skeleton.files
    max_shard = max(files.sizes.values()) if files.sharded else None
    params = sum(p.numel() for p in skeleton.model.parameters())
    writer = ShardWriter(folder, [t for _, _, planned in units for t in planned], max_shard,
                         index_metadata={"total_parameters": params})
    began = time.perf_counter()
    with skeleton.lock:  # one pass at a time over a model two dashboard sessions may share
        try:
            for done, (unit, names, planned) in enumerate(units, 1):
                if not planned:
                    continue
                with skeleton.materialized(unit):
                    values = skeleton.values(unit)
                    saved = _reverted(skeleton.model, {n: values[n] for n in names})
                    for t in planned:
                        writer.write(t.name, saved[t.name])
                    del values, saved
                model.report_block(done, len(units), files.bytes_read, time.perf_counter() - began)
            writer.finish()
        except BaseException:
            writer.abort()
            raise
