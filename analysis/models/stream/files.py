"""The safetensors files of one checkpoint — a single `model.safetensors` or shards listed by
`model.safetensors.index.json` — read tensor by tensor at the offsets their headers give.

Every file is checked before any tensor is read, each problem one sentence: an index that is not JSON or names a
shard that is not there, a shard that is a FIFO or device, a symbolic link leading out of the model folder (a
Hugging Face cache snapshot's links into its own `blobs/` are fine), a corrupt or truncated header, a tensor the
index puts in a shard that does not hold it, or one tensor in two shards.

Tensors are read with positioned reads into memory this process owns rather than through a memory map: pages of a
mapped file count toward the process's resident memory for as long as they stay mapped, and a file truncated
while mapped kills the process with SIGBUS instead of one sentence. Repeated reads come from the page cache.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import torch

from analysis.errors import AnalysisError
from analysis.io import reads
from analysis.io.writes import show
from analysis.models import checkpoint

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_INDEX_BYTES = 64 << 20   # a hub index for a 1T-parameter model is a few MB
HINT = "re-save or re-download the model"

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


@dataclass(frozen=True)
class Entry:
    """Where one tensor's bytes are."""
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int            # absolute byte offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class CheckpointFiles:
    """The tensors of a checkpoint directory, by name; `read(name)` returns a fresh tensor as stored."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.files = self._weight_files()
        self.entries: dict[str, Entry] = {}
        self.sizes: dict[Path, int] = {}
        for file in self.files:
            header, data_start = checkpoint.header_entries(file)
            self.sizes[file] = os.stat(file).st_size
            for name, t in header.items():
                if t["dtype"] not in DTYPES:
                    raise AnalysisError(f"{file} holds tensor {name} as {t['dtype']}, a type this tool does not "
                                        f"read; {HINT}.")
                if name in self.entries:
                    raise AnalysisError(f"Tensor {name} is in both {self.entries[name].file.name} and {file.name}; "
                                        f"a checkpoint holds each tensor once, so {HINT}.")
                first, last = (int(x) for x in t["data_offsets"])
                self.entries[name] = Entry(file, DTYPES[t["dtype"]], tuple(int(n) for n in t["shape"]),
                                           data_start + first, data_start + last)
        self._check_index()
        self.bytes_read = 0
        self._fds: dict[Path, int] = {}

    @property
    def sharded(self) -> bool:
        return (self.path / INDEX).exists()

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def headers(self) -> dict:
        """{name: shape} of every tensor (what checkpoint.check_tensors compares with the config's model)."""
        return {name: e.shape for name, e in self.entries.items()}

    # ---- which files ------------------------------------------------------------------------------
    def _weight_files(self) -> list[Path]:
        index = self.path / INDEX
        if index.exists() or index.is_symlink():
            self.index = self._read_index(index)
            names = sorted(set(self.index.values()))
        elif (self.path / SINGLE).exists():
            self.index, names = None, [SINGLE]
        else:
            self.index, names = None, sorted(p.name for p in self.path.glob("*.safetensors"))
        if not names:
            raise AnalysisError(f"{self.path} has no .safetensors weights; only safetensors checkpoints are loaded.")
        return [self._checked_file(name) for name in names]

    def _read_index(self, index: Path) -> dict:
        try:
            data = reads.loads(reads.read_bytes(index, MAX_INDEX_BYTES, "The index", HINT).decode("utf-8"),
                               f"The index {index}", HINT)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise AnalysisError(f"{index} cannot be read as JSON ({reason}); {HINT}.") from None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise AnalysisError(f"{index} has no weight_map of tensor names to shard files; {HINT}.")
        for shard in set(weight_map.values()):
            if "/" in shard or "\\" in shard or shard in (".", "..") or not shard.endswith(".safetensors"):
                raise AnalysisError(f"{index} names the shard {show(shard, 60)}, which is not a .safetensors file in "
                                    f"the model folder; {HINT}.")
        return weight_map

    def _checked_file(self, name: str) -> Path:
        file = self.path / name
        if not os.path.lexists(file):
            raise AnalysisError(f"{self.path / INDEX} names the shard {name}, which is not in {self.path}; download "
                                "the missing shard or re-save the model.")
        real = Path(os.path.realpath(file))
        if file.is_symlink() and not any(real == root or root in real.parents for root in self._link_roots()):
            raise AnalysisError(f"Shard {file} is a symbolic link to {show(real)}, outside the model folder; copy the "
                                "file into the folder (a model is read only from its own folder).")
        try:
            mode = os.stat(file).st_mode
        except OSError as exc:
            raise AnalysisError(f"{file} cannot be read ({exc.strerror or exc}); check that it is a readable "
                                "safetensors file (not a broken link or a folder).") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a folder is refused by its header read, as before
            raise AnalysisError(f"Shard {file} is not a regular file (it is {reads.kind_of(mode)}); {HINT}.")
        return file

    def _link_roots(self) -> list[Path]:
        """Where a shard's link may lead: the folder itself, and for a Hugging Face cache snapshot
        (models--org--name/snapshots/REV) the cache entry that holds its blobs."""
        folder = Path(os.path.realpath(self.path))
        roots = [folder]
        if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
            roots.append(folder.parent.parent)
        return roots

    def _check_index(self) -> None:
        if self.index is None:
            return
        for name, shard in self.index.items():
            entry = self.entries.get(name)
            if entry is None or entry.file.name != shard:
                where = "no shard" if entry is None else entry.file.name
                raise AnalysisError(f"{self.path / INDEX} puts tensor {name} in {shard}, but {where} holds it; "
                                    f"{HINT}.")

    # ---- reading ----------------------------------------------------------------------------------
    def read(self, name: str) -> torch.Tensor:
        """A new tensor with the stored bytes of `name` (its stored dtype and shape)."""
        entry = self.entries[name]
        return self._read_bytes(name, 0, entry.nbytes).view(entry.dtype).reshape(entry.shape)

    def read_rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows start..stop-1 of the matrix `name` (one positioned read: a matrix's rows are stored one after another)."""
        entry = self.entries[name]
        row = entry.nbytes // entry.shape[0]
        return self._read_bytes(name, start * row, (stop - start) * row).view(entry.dtype) \
            .reshape(stop - start, *entry.shape[1:])

    def gather_rows(self, name: str, indices: torch.Tensor) -> torch.Tensor:
        """The rows `indices` (a 1-D tensor of row numbers, each in range) of the matrix `name`, in that order; each
        distinct row is read once."""
        entry = self.entries[name]
        rows = entry.shape[0]
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= rows):
            raise AnalysisError(f"A token id is outside the {rows:,} rows of {name}; the ids do not belong to this "
                                "model's vocabulary (check the tokenizer).")
        distinct, where = torch.unique(indices, return_inverse=True)
        read = torch.stack([self.read_rows(name, i, i + 1)[0] for i in distinct.tolist()]) if distinct.numel() \
            else torch.empty(0, *entry.shape[1:], dtype=entry.dtype)
        return read[where]

    def _read_bytes(self, name: str, offset: int, nbytes: int) -> torch.Tensor:
        """`nbytes` bytes of tensor `name` from `offset` within it, into a new uint8 tensor."""
        entry = self.entries[name]
        buf = torch.empty(nbytes, dtype=torch.uint8)
        view = memoryview(buf.numpy()) if nbytes else memoryview(b"")
        done = 0
        try:
            fd = self._fd(entry.file)
            while done < nbytes:
                got = os.preadv(fd, [view[done:]], entry.start + offset + done)
                if got <= 0:
                    raise AnalysisError(f"{entry.file} ended before tensor {name} (it was truncated after the "
                                        f"load began); {HINT}.")
                done += got
        except OSError as exc:
            raise AnalysisError(f"Reading tensor {name} from {entry.file} failed ({exc.strerror or exc}); "
                                f"{HINT}.") from None
        self.bytes_read += nbytes
        return buf

    def _fd(self, file: Path) -> int:
        if file not in self._fds:
            self._fds[file] = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        return self._fds[file]

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
