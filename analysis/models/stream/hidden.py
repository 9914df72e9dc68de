"""The hidden states of every batch between two blocks: in memory while they fit the budget, else in a temporary
file.

The file is created already unlinked (`tempfile.TemporaryFile`), so nothing is left behind however the process
ends — closed, crashed or killed — and it is written and read with positioned writes and reads (mapped pages would
count toward the process's memory). A full disk while spilling is one sentence.
"""
from __future__ import annotations

import errno
import os
import tempfile

import torch

from analysis.errors import AnalysisError

SPILL_DIR_ENV = "STATE_RANK_SPILL_DIR"   # where spilled hidden states go (default: the system's temporary folder)


def spill_dir() -> str:
    return os.environ.get(SPILL_DIR_ENV) or tempfile.gettempdir()


class HiddenStates:
    """Slot m holds batch m's hidden state; `spill` puts every slot in one temporary file instead of memory."""

    def __init__(self, sizes: list[int], spill: bool):
        self.spill = spill
        self._memory: dict[int, torch.Tensor] = {}
        self._meta: dict[int, tuple] = {}
        self._offsets, offset = [], 0
        for size in sizes:
            self._offsets.append(offset)
            offset += size
        self._file = None
        if spill:
            try:
                self._file = tempfile.TemporaryFile(dir=spill_dir(), prefix="state-rank-hidden-")
            except OSError as exc:
                raise AnalysisError(f"Could not create a temporary file in {spill_dir()} for the hidden states "
                                    f"({exc.strerror or exc}); set {SPILL_DIR_ENV} to a writable folder or raise "
                                    "--max-memory.") from None

    def put(self, m: int, tensor: torch.Tensor) -> None:
        if not self.spill:
            self._memory[m] = tensor
            return
        data = tensor.detach().contiguous()
        self._meta[m] = (data.dtype, tuple(data.shape))
        raw = memoryview(data.view(-1).view(torch.uint8).numpy()) if data.numel() else memoryview(b"")
        done = 0
        try:
            while done < len(raw):
                done += os.pwrite(self._file.fileno(), raw[done:], self._offsets[m] + done)
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            reason = "the disk is full" if full else (exc.strerror or str(exc)).lower()
            raise AnalysisError(f"Spilling hidden states to {spill_dir()} failed: {reason}; free space there, set "
                                f"{SPILL_DIR_ENV} to a folder with room, or raise --max-memory.") from None

    def get(self, m: int) -> torch.Tensor:
        if not self.spill:
            return self._memory[m]
        dtype, shape = self._meta[m]
        n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        buf = torch.empty(n, dtype=torch.uint8)
        view, done = memoryview(buf.numpy()), 0
        while done < n:
            got = os.preadv(self._file.fileno(), [view[done:]], self._offsets[m] + done)
            if got <= 0:
                raise AnalysisError("The temporary file of spilled hidden states ended early; run the command again.")
            done += got
        return buf.view(dtype).reshape(shape)

    def close(self) -> None:
        self._memory.clear()
        if self._file is not None:
            self._file.close()
            self._file = None
