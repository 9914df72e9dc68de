"""safetensors files written tensor by tensor, so a model larger than memory can be saved one block at a time.

The plan — every tensor's name, dtype and shape, in the order they will come — is known before the first byte
(a streamed model knows its shapes from its meta skeleton), so each file's header is written first and each
tensor's bytes are appended when it arrives; `finish()` checks that every planned tensor came, and writes the
index `model.safetensors.index.json` for a sharded save as transformers writes it. A save goes into a folder
`analysis.io.writes.write_model_dir` prepares (marker, fsync, one-step swap), so a killed or failed save leaves
nothing half-written under the model's name. The format is the safetensors spec: an 8-byte little-endian header
length, the JSON header (padded with spaces to 8 bytes), then the data, tensors back to back.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
DTYPE_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
               "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
               "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


@dataclass(frozen=True)
class Planned:
    name: str
    dtype: str            # torch dtype name, e.g. "bfloat16"
    shape: tuple[int, ...]
    nbytes: int


def _entry_bound(t: Planned) -> int:
    """An upper bound of one tensor's bytes in a header (offsets counted at 20 digits each) plus its comma."""
    return len(json.dumps({t.name: {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                                    "data_offsets": [10 ** 19, 10 ** 19]}}, separators=(",", ":"))) + 1


def plan_files(tensors: list[Planned], max_file_bytes: int | None, metadata: dict | None = None) -> list[list[Planned]]:
    """Tensors in order, cut into files of at most max_file_bytes on disk, header included (None: one file); a
    tensor that does not fit alone gets a file of its own."""
    if max_file_bytes is None:
        return [list(tensors)]
    fixed = 8 + 8 + len(json.dumps({"__metadata__": {"format": "pt", **(metadata or {})}}, separators=(",", ":")))
    files, current, size = [], [], fixed
    for t in tensors:
        grown = size + t.nbytes + _entry_bound(t)
        if current and grown > max_file_bytes:
            files.append(current)
            current, grown = [], fixed + t.nbytes + _entry_bound(t)
        current.append(t)
        size = grown
    if current or not files:
        files.append(current)
    return files


def file_names(count: int, sharded: bool) -> list[str]:
    if not sharded:
        return [SINGLE]
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


class ShardWriter:
    """Writes the planned tensors into `folder` in plan order: `write(name, tensor)` for each, then `finish()`."""

    def __init__(self, folder: Path, tensors: list[Planned], max_file_bytes: int | None,
                 metadata: dict | None = None, index_metadata: dict | None = None):
        self.folder = Path(folder)
        self.sharded = max_file_bytes is not None
        self.files = plan_files(tensors, max_file_bytes, metadata)
        self.names = file_names(len(self.files), self.sharded)
        self.metadata = {"format": "pt", **(metadata or {})}
        self.index_metadata = index_metadata or {}
        self._order = [(f, t) for f, group in enumerate(self.files) for t in group]
        self._next = 0
        self._open: tuple[int, object] | None = None

    def write(self, name: str, tensor) -> None:
        import torch
        if self._next >= len(self._order) or self._order[self._next][1].name != name:
            expected = self._order[self._next][1].name if self._next < len(self._order) else "nothing more"
            raise ValueError(f"tensor {name} written out of plan order (expected {expected})")
        index, planned = self._order[self._next]
        data = tensor.detach().contiguous().cpu()
        if str(data.dtype).removeprefix("torch.") != planned.dtype or tuple(data.shape) != planned.shape:
            raise ValueError(f"tensor {name} is {data.dtype} {list(data.shape)}, planned {planned.dtype} "
                             f"{list(planned.shape)}")
        fh = self._file(index)
        if data.numel():
            fh.write(memoryview(data.view(-1).view(torch.uint8).numpy()))
        self._next += 1

    def _file(self, index: int):
        if self._open is not None and self._open[0] == index:
            return self._open[1]
        self._close()
        fh = open(self.folder / self.names[index], "xb")
        header, offset = {}, 0
        for t in self.files[index]:
            header[t.name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                              "data_offsets": [offset, offset + t.nbytes]}
            offset += t.nbytes
        header["__metadata__"] = self.metadata
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-len(text) % 8)
        fh.write(len(text).to_bytes(8, "little") + text)
        self._open = (index, fh)
        return fh

    def _close(self) -> None:
        if self._open is not None:
            fh = self._open[1]
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            self._open = None

    def finish(self) -> None:
        if self._next != len(self._order):
            raise ValueError(f"{len(self._order) - self._next} planned tensors were never written")
        for index, group in enumerate(self.files):
            if not group:
                self._file(index)  # an empty model file still gets its header
        self._close()
        if self.sharded:
            weight_map = {t.name: self.names[f] for f, t in self._order}
            total = sum(t.nbytes for _, t in self._order)
            index = {"metadata": {**self.index_metadata, "total_size": total}, "weight_map": weight_map}
            (self.folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def abort(self) -> None:
        """Close what is open (the folder itself is removed by the save that owns it)."""
        if self._open is not None:
            self._open[1].close()
            self._open = None
