"""StreamedModel: what the core holds instead of a model that does not fit its memory budget.

It answers what the core asks a model — its config, its modules (the family's adapter walks them to find the
linear layers, their heads and dims), `parameters()` for devices, dtypes and counts — from the skeleton, whose
parameters are on the meta device; `parameters()` yields stand-ins of the right shape, dtype and device that own
one element each. Running it goes through `run(batches, ...)` (analysis.models.forward.run_batches), which reads
each layer once for all the batches; `model(ids)` is the same run for one batch, with its whole logits.
Hooks the core puts on a linear layer fire when that layer runs, as in an in-memory forward.
"""
from __future__ import annotations

import contextlib
import contextvars
from types import SimpleNamespace

import torch

from analysis.errors import AnalysisError
from analysis.models.stream.runner import Runner, learn_output
from analysis.models.stream.skeleton import Skeleton


_reporter: contextvars.ContextVar = contextvars.ContextVar("block_reporter", default=None)


@contextlib.contextmanager
def reporting_blocks(callback):
    """Inside, every streamed pass also calls callback(blocks done, blocks, bytes read, seconds) after each block:
    how a dashboard job shows a shared model's progress without setting anything on the model."""
    token = _reporter.set(callback)
    try:
        yield
    finally:
        _reporter.reset(token)


class StreamedModel:
    streamed = True

    def __init__(self, skeleton: Skeleton, device: torch.device, limit: float, sample_ids: torch.Tensor):
        self.skeleton = skeleton
        self.device = device
        self.limit = limit
        self.shape = learn_output(skeleton, sample_ids)
        self.on_block = None      # progress(done, total, bytes read, seconds): set by the CLI or a dashboard job
        self.last_run: dict = {}

    # ---- what the core reads of a model ------------------------------------------------------------
    @property
    def config(self):
        return self.skeleton.model.config

    def __getattr__(self, name):
        if name.startswith("__") or name in ("skeleton",):
            raise AttributeError(name)
        return getattr(self.skeleton.model, name)  # model.model.layers, named_modules(), ... (meta weights)

    def parameters(self, recurse: bool = True):
        for p in self.skeleton.model.parameters():
            yield torch.empty((), dtype=p.dtype, device=self.device).expand(p.shape)

    def named_parameters(self, *args, **kwargs):
        for name, p in self.skeleton.model.named_parameters(*args, **kwargs):
            yield name, torch.empty((), dtype=p.dtype, device=self.device).expand(p.shape)

    def eval(self):
        return self

    @property
    def running(self) -> bool:
        """A pass over this model (or over a pruned view of it, which shares its lock) is running in some thread,
        or some of its weights are materialised: what the dashboard's scheduler must not pause in the middle of."""
        return self.skeleton.lock.held or bool(self.skeleton.live)

    @property
    def blocks(self) -> int:
        return len(self.skeleton.block_units())

    @property
    def largest_unit_bytes(self) -> int:
        """The most weight bytes a pass holds at once: the largest unit held whole, or one slice of a head read by
        rows (the embedding is read by the rows of its ids)."""
        return max(self.skeleton.held_bytes(u) for u in self.skeleton.units)

    @property
    def largest_unit(self):
        """(name, bytes) of what largest_unit_bytes counts."""
        unit = max(self.skeleton.units, key=self.skeleton.held_bytes)
        return unit.name, self.skeleton.held_bytes(unit)

    def weights_of(self, module):
        """analysis.models.forward.weights_of: the unit holding `module`, materialised while inside."""
        return self.skeleton.materialized(self.skeleton.unit_holding(module))

    def named_tensors(self):
        """(name, tensor) of the state dict in name order, as `sorted(model.state_dict().items())` of the model held
        whole gives them; each unit is read once (a unit's names are contiguous in that order)."""
        sk = self.skeleton
        unit_of = {full: unit for unit in sk.units for *_, full in unit.slots}
        live = None
        try:
            for name in sorted(sk.model.state_dict()):
                unit = unit_of.get(name)
                if unit is None:  # a non-persistent buffer is not in a state dict; a real one needs no reading
                    yield name, sk.model.get_buffer(name)
                    continue
                if live is not unit:
                    if live is not None:
                        sk.release(live)
                    sk.materialize(unit)
                    live = unit
                yield name, sk.values(unit)[name]
        finally:
            if live is not None:
                sk.release(live)

    # ---- running -----------------------------------------------------------------------------------
    def run(self, batches, *, on_logits=None, cancel=None, progress=None, hidden_limit=None, logits_limit=None,
            begin=None, keep=None):
        """See analysis.models.forward.run_batches; begin / keep: layer-prefix reuse (Runner.run,
        analysis.models.stream.reuse)."""
        from analysis.models import limits
        work = max((limits.block_work_bytes(self, b.shape[0], b.shape[1]) for b in batches), default=0)
        spare = max(self.limit - self.largest_unit_bytes - work, 0)   # beside a layer at work: the hidden states
        hidden = max((b.numel() * self.config.hidden_size * 4 for b in batches), default=0)
        head = max((self.skeleton.held_bytes(u) for u in self.skeleton.rest_units()), default=0)
        tail = max(self.limit - head - 2 * hidden, 0) // 2  # the tail holds the LM head, one batch and its logits
        runner = Runner(self.skeleton, self.shape,
                        hidden_limit=spare if hidden_limit is None else hidden_limit,
                        logits_limit=max(tail, 1) if logits_limit is None else logits_limit)

        def report(*args):
            if progress is not None:
                progress(*args)
            self.report_block(*args)
        runner.run(batches, on_logits=on_logits, cancel=cancel, progress=report, device=self.device, begin=begin,
                   keep=keep)
        self.last_run = {"spilled": runner.last_spilled, "blocks_read": runner.blocks_read}

    def report_block(self, done: int, total: int, bytes_read: int, seconds: float) -> None:
        """After each block of a pass (or of a save): the CLI's bar (`on_block`) and a dashboard job's line."""
        for callback in (self.on_block, _reporter.get()):
            if callback is not None:
                callback(done, total, bytes_read, seconds)

    def parameter_gradients(self, batches, names: list[str], cancel=None) -> dict:
        """{full name: float32 gradient} of Σ batch loss × batch size (analysis.models.stream.gradients)."""
        from analysis.models import limits
        from analysis.models.stream.gradients import parameter_gradients
        work = max((limits.block_work_bytes(self, b.shape[0], b.shape[1]) for b in batches), default=0)
        spare = max(self.limit - 3 * self.largest_unit_bytes - 3 * work, 0)
        return parameter_gradients(self, batches, names, cancel, hidden_limit=spare)

    def __call__(self, input_ids=None, use_cache=False, **kwargs):
        if any(v is not None for v in kwargs.values()):  # a mask, labels, a cache: not what a pass of blocks takes
            raise AnalysisError(f"A model read one block at a time runs whole, unpadded sequences of token ids only "
                                f"(it was given {', '.join(k for k, v in kwargs.items() if v is not None)}); raise "
                                "--max-memory so that it loads whole.")
        parts = []
        self.run([input_ids], on_logits=lambda _m, _first, logits: parts.append(logits))
        return SimpleNamespace(logits=torch.cat(parts, dim=1))

    def save_pretrained(self, save_directory, safe_serialization: bool = True, **_ignored) -> None:
        """Config and safetensors one unit at a time, sharded like the checkpoint read (analysis.models.stream.save)."""
        from analysis.models.stream.save import save_streamed
        save_streamed(self, save_directory)

    def close(self) -> None:
        self.skeleton.files.close()
