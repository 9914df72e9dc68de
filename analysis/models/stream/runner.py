"""Push a list of batches through a model one decoder layer at a time: each layer's weights are read once, every
batch goes through it, and it is released before the next one is read.

What a decoder layer needs besides the hidden states (rotary position embeddings, attention masks, Zamba2's
original embeddings, ...) is whatever the model's own forward passes it, so nothing is re-derived here: a
*capture* runs the model's forward on each batch with every layer replaced by a recorder that keeps its arguments
and hands the hidden states on unchanged (only the embeddings run; the last recorder stops the forward). The
layers then run on those arguments, batch after batch, exactly as the model's loop would call them — the same
operations on the same inputs as an in-memory forward of the same batches. The *tail* (final norm, LM head and
whatever the family does to its logits) is the model's own forward again, on placeholder embeddings, with every
layer replaying the last layer's output; it runs on chunks of the tokens so the logits never exceed the budget.

A recorder must return what a layer returns (a tensor, or a tuple whose first item is the hidden state), which the
layer itself shows once: `learn_output` runs the first layer on one token when the model is opened.
"""
from __future__ import annotations

import contextlib
import time

import torch

from analysis.errors import AnalysisError
from analysis.models.layer_calls import layers_replaced
from analysis.models.stream.hidden import HiddenStates
from analysis.runtime.allocator import trim
from analysis.runtime.cancel import check


class _Stop(Exception):
    """Raised by the last recorder: the capture needs nothing after the layers."""


def hidden_of(args, kwargs) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def with_hidden(args, kwargs, hidden):
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


class OutputShape:
    """What a decoder layer returns, learned from the layer itself: a tensor, or a tuple led by the hidden state.

    Other tensors in the tuple are *carried* to the next layer (RWKV-7's v_first: the first layer's values, which
    every later layer reads and hands on): the model's loop passes each back in as an argument, whose name the
    capture learns (`names`), and the runner keeps them per batch beside the hidden states."""

    def __init__(self, example):
        if torch.is_tensor(example):
            self.rest, self.carried = None, []
        elif isinstance(example, tuple) and example and torch.is_tensor(example[0]):
            self.carried = [j for j, x in enumerate(example[1:], 1) if torch.is_tensor(x)]
            self.rest = tuple(None if j in self.carried else x for j, x in enumerate(example[1:], 1))
        else:
            raise AnalysisError(f"This model's layers return {type(example).__name__}, not the hidden state, so it "
                                "cannot be run one layer at a time; load it whole (raise --max-memory).")
        self.names: list = []   # where each carried tensor goes back in: an argument index or a keyword

    def wrap(self, hidden, carried=()):
        if self.rest is None:
            return hidden
        out = [hidden, *self.rest]
        for j, value in zip(self.carried, carried):
            out[j] = value
        return tuple(out)

    @staticmethod
    def first(output):
        return output if torch.is_tensor(output) else output[0]

    def carried_of(self, output) -> list:
        return [output[j] for j in self.carried]

    def learn_names(self, markers: list, args, kwargs) -> None:
        """The argument of each carried tensor: where the next layer received the marker the last one returned."""
        found = {id(v): i for i, v in enumerate(args)} | {id(v): k for k, v in kwargs.items()}
        if not all(id(m) in found for m in markers):
            raise AnalysisError("This model's layers hand a tensor on to the next layer that the model changes in "
                                "between, so it cannot be run one layer at a time; load it whole (raise "
                                "--max-memory).")
        self.names = [found[id(m)] for m in markers]

    def take(self, args, kwargs) -> tuple[tuple, dict, list]:
        """(args, kwargs) with the carried tensors left out, and those tensors."""
        args, kwargs, values = list(args), dict(kwargs), []
        for name in self.names:
            if isinstance(name, int):
                values.append(args[name])
                args[name] = None
            else:
                values.append(kwargs[name])
                kwargs[name] = None
        return tuple(args), kwargs, values

    def give(self, args, kwargs, values) -> tuple[tuple, dict]:
        args, kwargs = list(args), dict(kwargs)
        for name, value in zip(self.names, values):
            if isinstance(name, int):
                args[name] = value
            else:
                kwargs[name] = value
        return tuple(args), kwargs


def learn_output(skeleton, sample_ids: torch.Tensor) -> OutputShape:
    """Run the model's forward on one token until the first layer returns, and keep the shape of what it returned."""
    seen = {}
    first = skeleton.layers[0]
    original = first.forward

    def probe(*args, **kwargs):
        seen["out"] = original(*args, **kwargs)
        raise _Stop

    unit = skeleton.block_units()[0]
    with torch.no_grad(), skeleton.materialized(unit), skeleton.rest_on_demand():
        first.forward = probe
        try:
            skeleton.model(input_ids=sample_ids[:1, :1], use_cache=False)
        except _Stop:
            pass
        finally:
            del first.forward
    if "out" not in seen:
        raise AnalysisError("This model's forward never reached its first layer, so it cannot be run one layer at a "
                            "time; load it whole (raise --max-memory).")
    return OutputShape(seen["out"])


class Runner:
    """Runs batches through a Skeleton block by block (see the module docstring)."""

    def __init__(self, skeleton, shape: OutputShape, hidden_limit: float, logits_limit: float):
        self.skeleton, self.shape = skeleton, shape
        self.hidden_limit, self.logits_limit = hidden_limit, logits_limit
        self.last_spilled = False
        self.blocks_read = 0   # decoder blocks the last run read (a batch started past a block skips it)

    def capture(self, batches, device) -> tuple[list, list]:
        """(per batch the first layer's inputs: its hidden state and the carried tensors, per batch the (args, kwargs)
        of every layer with those left out)."""
        layers, shape = self.skeleton.layers, self.shape
        starts, records = [], []
        for ids in batches:
            calls = [None] * len(layers)
            first = {}
            markers = [torch.empty(0) for _ in shape.carried]  # what each layer hands on: its place is learned

            def recorder(i):
                def record(*args, **kwargs):
                    hidden = hidden_of(args, kwargs)
                    if i == 0:
                        first["hidden"] = hidden
                    if markers and i == 1 and not shape.names:
                        shape.learn_names(markers, args, kwargs)
                    calls[i] = with_hidden(args, kwargs, None)
                    if i == len(layers) - 1:
                        raise _Stop
                    return shape.wrap(hidden, markers)
                return record
            with layers_replaced(layers, recorder):
                try:
                    self.skeleton.model(input_ids=ids.to(device), use_cache=False)
                except _Stop:
                    pass
            if any(c is None for c in calls):
                raise AnalysisError("This model's forward did not call every layer once, so it cannot be run one "
                                    "layer at a time; load it whole (raise --max-memory).")
            first_args, first_kwargs = calls[0]
            first_args, first_kwargs, carried = shape.take(first_args, first_kwargs)
            calls[0] = (first_args, first_kwargs)
            for i in range(1, len(calls)):
                calls[i] = shape.take(*calls[i])[:2]
            starts.append([first["hidden"], *carried])
            records.append(calls)
        return starts, records

    def run(self, batches, *, on_logits=None, cancel=None, progress=None, device="cpu", begin=None,
            keep=None) -> None:
        """Every batch through every layer; then on_logits(batch index, first position, logits [b, n, V]) per chunk
        of tokens when asked. progress(units done, units, bytes read) after each layer.

        Layer-prefix reuse (analysis.models.stream.reuse): begin[m] = (layer l, [hidden, *carried] at layer l's
        input) starts batch m at layer l on those tensors instead of the embeddings (None or l = 0: from the start);
        a block no batch needs is not read. keep(layer i, batch m, [hidden, *carried]) receives every layer's
        input (i ≥ 1) as the pass reaches it."""
        sk, shape = self.skeleton, self.shape
        units = sk.block_units()
        total = len(units) + (1 if on_logits else 0)
        start_bytes = sk.files.bytes_read
        with contextlib.ExitStack() as stack:
            stack.enter_context(sk.lock)  # the whole pass: another thread's pass on this model waits
            stack.enter_context(torch.no_grad())
            with sk.rest_on_demand(keep=True):  # the embeddings, read once for every capture
                starts, records = self.capture(batches, device)
            first_layer = [0] * len(batches)
            for m, given in enumerate(begin or []):
                if given is not None and given[0] > 0:
                    first_layer[m], starts[m] = given[0], list(given[1])
            width = 1 + len(shape.carried)  # slots per batch: its hidden state, then what the layers carry
            sizes = [t.numel() * t.element_size() for tensors in starts for t in tensors]
            self.last_spilled = sum(sizes) > self.hidden_limit
            store = HiddenStates(sizes, spill=self.last_spilled)
            stack.callback(store.close)
            for m, tensors in enumerate(starts):
                for c, tensor in enumerate(tensors):
                    store.put(m * width + c, tensor)
            del starts
            began = time.perf_counter()
            self.blocks_read = 0
            for i, (layer, unit) in enumerate(zip(sk.layers, units)):
                check(cancel)
                if keep is not None and i > 0:
                    for m in range(len(records)):
                        if first_layer[m] <= i:
                            keep(i, m, [store.get(m * width + c) for c in range(width)])
                todo = [m for m in range(len(records)) if first_layer[m] <= i]
                for m in range(len(records)):
                    if first_layer[m] > i:  # this batch starts past this layer: its arguments are not needed
                        records[m][i] = None
                if not todo:  # every batch starts past this layer: its block is not read
                    if progress:
                        progress(i + 1, total, sk.files.bytes_read - start_bytes, time.perf_counter() - began)
                    continue
                self.blocks_read += 1
                with sk.materialized(unit):
                    for m in todo:
                        calls = records[m]
                        check(cancel)
                        args, kwargs = with_hidden(*calls[i], store.get(m * width))
                        args, kwargs = shape.give(args, kwargs, [store.get(m * width + c) for c in range(1, width)])
                        out = layer(*args, **kwargs)
                        for c, tensor in enumerate([shape.first(out), *shape.carried_of(out)]):
                            store.put(m * width + c, tensor)
                        calls[i] = None  # this layer's arguments are not needed again
                trim()  # its work's small tensors (under the mmap threshold) leave free heap pages: hand them back
                if progress:
                    progress(i + 1, total, sk.files.bytes_read - start_bytes, time.perf_counter() - began)
            if on_logits:
                self._tail(store, width, batches, on_logits, cancel)
                if progress:
                    progress(total, total, sk.files.bytes_read - start_bytes, time.perf_counter() - began)

    def _tail(self, store, width, batches, on_logits, cancel) -> None:
        """Final norm, LM head and the family's logit scaling: the model's own forward over replayed layers."""
        sk = self.skeleton
        model = sk.model
        vocab = int(model.config.get_text_config().vocab_size) if hasattr(model.config, "get_text_config") \
            else int(model.config.vocab_size)
        replay = {}
        with sk.rest_on_demand(keep=True), \
                layers_replaced(sk.layers, lambda _i: lambda *a, **k: self.shape.wrap(replay["h"])):
            for m, ids in enumerate(batches):
                hidden = store.get(m * width)
                b, t = hidden.shape[:2]
                per_token = b * vocab * 4 * 3  # logits in the model's dtype, an fp32 copy, a log-softmax
                chunk = max(1, min(t, int(self.logits_limit // max(per_token, 1))))
                for first in range(0, t, chunk):
                    check(cancel)
                    replay["h"] = hidden[:, first:first + chunk]
                    dummy = torch.zeros_like(replay["h"])
                    logits = model(inputs_embeds=dummy, use_cache=False).logits
                    on_logits(m, first, logits)
                    del logits
