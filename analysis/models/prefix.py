"""Layer-prefix reuse: points measured on the same tokens start at their first changed decoder layer.

A point of a sensitivity map prunes ONE layer l, and a plan changes the layers from its first changed one on: up
to that layer the pruned model computes exactly what the unpruned model computes. A `PrefixCache` belongs to one
unpruned model and one set of points; while it is active (`with cache.active():`, the measurement of each point),
`analysis.models.forward.run_batches` hands it every batch of token ids:

- the unpruned model itself runs its ordinary forward, and each decoder layer's output is kept (a copy) for that
  batch: the hidden states (and whatever a layer hands on, e.g. RWKV-7's v_first) at the next layer's input;
- a model derived from it (a prune: the same parameter names, equal weights outside the decoder layers) runs its
  own forward on the same ids with every decoder layer before its first changed one replaced by a stub that
  returns the unpruned model's kept output of that layer. Its own embeddings, masks and position embeddings are
  computed as ever, so an attention block after the start gets exactly what the model's loop gives it;
- the first changed layer is found from the weights (the first decoder layer whose parameters differ in name,
  shape or value), not from a plan, so whatever a strategy changes is seen; any other model runs its whole forward.

Exact: the layers from the start on run the same operations on the same inputs as a whole forward (tests:
equal within 1e-5 relative on gated-deltanet-small and on the qwen35-hybrid-small with attention blocks).
The model's loop is checked once per batch while recording: each layer's hidden input must be the previous layer's
output, unchanged; a model whose loop does something in between (so a stub would skip it) is never served.

Memory: the kept outputs are held in memory per batch of windows (a "chunk": the perplexity's batch), at most
PREFIX_FRACTION of the request's memory budget (`--max-memory`, analysis.models.limits.allowed). A batch that does
not fit is not kept: every point RECOMPUTES it with its whole forward (the exact old path), so past the budget
the saving shrinks but the memory does not grow. Nothing goes to disk.

Streamed models (analysis.models.stream): a cache whose unpruned model is streamed hands every streamed pass to
analysis.models.stream.reuse (`run_streamed`): the unpruned model's layer inputs are kept ON DISK per batch of
windows (analysis.io.kept_states: the project's cache area, atomic files, at most half the free disk space; what
does not fit is recomputed), and a pruned view reads only the blocks from its first changed layer on.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import weakref
from dataclasses import dataclass, field

import torch

from analysis.models.layer_calls import layers_replaced

PREFIX_FRACTION = 0.25   # of the request's memory budget the kept outputs may hold
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("state_rank_prefix_cache", default=None)


def is_streamed(model) -> bool:
    """As analysis.models.forward.is_streamed (which imports this module)."""
    return bool(getattr(model, "streamed", False))


def active():
    """The PrefixCache of the measurement running in this context, or None."""
    return _ACTIVE.get()


def _tensors(value) -> list[torch.Tensor]:
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _copy(value):
    """A copy of a layer's output whose tensors share nothing with the running forward."""
    if torch.is_tensor(value):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _hidden_in(args, kwargs):
    return args[0] if args else kwargs.get("hidden_states")


def _hidden_out(output):
    return output if torch.is_tensor(output) else output[0] if isinstance(output, tuple) and output else None


@dataclass
class PrefixStats:
    """What the cache did, for docs, benchmarks and tests."""
    recorded: int = 0          # batches whose outputs were kept
    not_kept: int = 0          # batches recorded but over the budget (their points recompute the whole forward)
    served: int = 0            # batches of derived models that started past layer 0
    layers_skipped: int = 0    # decoder layers not run thanks to the cache
    whole: int = 0             # batches run whole (first changed layer 0, unknown model, batch not kept)
    blocks_read: int = 0       # streamed: decoder blocks read from disk by the passes in this cache's scope
    blocks_skipped: int = 0    # streamed: decoder blocks a view did not read (its batches started past them)
    refused: str | None = None  # why this model's loop cannot be served (set once, then everything runs whole)
    starts: list = field(default_factory=list)  # first changed decoder layer of each derived model, in order


class PrefixCache:
    """The unpruned `base` model's decoder-layer outputs per batch of token ids, for the points of one set.

    budget_bytes: most bytes the kept outputs may hold (default PREFIX_FRACTION of limits.allowed()).
    fill_on_miss: a derived model meeting a batch the unpruned model has not run yet first runs the unpruned model
    on it (one extra whole forward per batch, which pays off from the second point on: a map's many points);
    False: outputs are kept only when the unpruned model itself is measured inside the scope."""

    def __init__(self, base, budget_bytes: float | None = None, fill_on_miss: bool = False):
        from analysis.archs import adapter_for
        from analysis.models import limits
        self.base, self.fill_on_miss = base, fill_on_miss
        self.layers = list(adapter_for(base).decoder_layers(base)) if not is_streamed(base) else []
        if budget_bytes is None:
            allowed, _ = limits.allowed(next(base.parameters()).device)
            budget_bytes = (allowed or 0) * PREFIX_FRACTION
        self.budget = float(budget_bytes)
        self.used = 0
        self.stats = PrefixStats()
        self.streamed = None
        if is_streamed(base):  # its layer inputs are kept on disk (analysis.models.stream.reuse)
            from analysis.models.stream.reuse import StreamedPrefix
            self.streamed = StreamedPrefix(base, self.stats, fill_on_miss)
        self._kept: dict[tuple, list] = {}    # batch key -> per decoder layer, its output (copied)
        self._seen: set[tuple] = set()        # batch keys recorded (kept or not)
        self._starts = weakref.WeakKeyDictionary()  # derived model -> its first changed decoder layer
        self._layer_of = self._param_layers(base, self.layers)

    # --- which layer a model starts at -----------------------------------------------------------------------
    @staticmethod
    def _param_layers(model, layers) -> dict[str, int]:
        """Parameter/buffer name -> the decoder layer holding it (names outside every decoder layer: absent)."""
        where = {id(layer): i for i, layer in enumerate(layers)}
        prefix_of = {name: where[id(m)] for name, m in model.named_modules() if id(m) in where}
        out = {}
        for name in model.state_dict():
            for p, i in prefix_of.items():
                if name.startswith(p + "."):
                    out[name] = i
                    break
        return out

    def first_changed(self, model) -> int:
        """The first decoder layer of `model` that differs from the base model (0: anything before the layers
        differs, or the model is not derived from it; len(layers): only what comes after the layers differs)."""
        if self.streamed is not None:
            return self.streamed.first_changed(model)
        if model is self.base:
            return len(self.layers)
        known = self._starts.get(model)
        if known is None:
            known = self._starts[model] = self._compare(model)  # weakly held: a finished point's model is freed
            self.stats.starts.append(known)
        return known

    def _compare(self, model) -> int:
        from analysis.archs import adapter_for
        if is_streamed(model):
            return 0
        try:
            layers = list(adapter_for(model).decoder_layers(model))
        except Exception:  # noqa: BLE001  not a model of a known family: no reuse
            return 0
        if len(layers) != len(self.layers):
            return 0
        mine, theirs = self.base.state_dict(), model.state_dict()
        their_layer = self._param_layers(model, layers)
        if their_layer != {k: v for k, v in self._layer_of.items() if k in theirs} or \
                set(theirs) - set(their_layer) != set(mine) - set(self._layer_of):
            return 0
        start = len(self.layers)
        for name in set(mine) | set(theirs):
            layer = self._layer_of.get(name, their_layer.get(name))
            if layer is not None and layer >= start:
                continue
            a, b = mine.get(name), theirs.get(name)
            same = (a is not None and b is not None and a.shape == b.shape and a.dtype == b.dtype
                    and a.device == b.device and torch.equal(a, b))
            if not same:
                if layer is None:
                    return 0  # embeddings, final norm or head changed: nothing is shared
                start = layer
        return start

    # --- running a batch --------------------------------------------------------------------------------------
    @staticmethod
    def _key(batch: torch.Tensor) -> tuple:
        data = batch.detach().cpu().contiguous()
        return tuple(data.shape), str(data.dtype), hashlib.sha256(data.numpy().tobytes()).hexdigest()

    def logits(self, model, batch: torch.Tensor) -> torch.Tensor:
        """model(batch).logits: the base model records its layers' outputs, a derived model starts past its
        unchanged layers where the batch's outputs are kept, anything else runs whole."""
        device = next(model.parameters()).device
        ids = batch.to(device)
        if self.stats.refused is None and self.layers:
            key = self._key(batch)
            if model is self.base:
                if key not in self._seen:
                    return self._record(key, ids)
            else:
                kept = self._kept.get(key)
                if kept is None and self.fill_on_miss and key not in self._seen and self.first_changed(model) > 0:
                    with torch.no_grad():
                        self._record(key, batch.to(next(self.base.parameters()).device))
                    kept = self._kept.get(key)
                start = self.first_changed(model) if kept is not None else 0
                if kept is not None and start > 0:
                    return self._resume(model, ids, kept, start)
        self.stats.whole += 1
        return model(ids, use_cache=False).logits

    def _record(self, key, ids) -> torch.Tensor:
        outputs: list = [None] * len(self.layers)
        handed: list = [None] * len(self.layers)   # the hidden state each layer returned, as the loop got it
        broken = []

        def recorder(i):
            layer = self.layers[i]
            original = type(layer).forward.__get__(layer)

            def record(*args, **kwargs):
                if i > 0 and _hidden_in(args, kwargs) is not handed[i - 1]:
                    broken.append(i)
                out = original(*args, **kwargs)
                handed[i] = _hidden_out(out)
                outputs[i] = _copy(out)
                return out
            return record
        with layers_replaced(self.layers, recorder):
            logits = self.base(ids, use_cache=False).logits
        self._seen.add(key)
        self.stats.recorded += 1
        if broken or any(o is None for o in outputs) or any(h is None for h in handed):
            self.stats.refused = ("the model's loop changes the hidden states between decoder layers (or does not "
                                  "call every layer once), so a pass cannot start at a later layer")
            self._kept.clear()
            return logits
        # each kept output must equal what the next layer received (no in-place change by the loop or the layer)
        if any(not torch.equal(_hidden_out(outputs[i]), handed[i]) for i in range(len(self.layers))):
            self.stats.refused = "a decoder layer's output changed after it was returned, so it cannot be replayed"
            self._kept.clear()
            return logits
        size = sum(t.numel() * t.element_size() for o in outputs[:-1] for t in _tensors(o))
        if self.used + size <= self.budget:
            self._kept[key] = outputs[:-1]  # the last layer's output starts nothing
            self.used += size
        else:
            self.stats.not_kept += 1
        return logits

    def _resume(self, model, ids, kept: list, start: int) -> torch.Tensor:
        layers = list(model_layers(model))

        def stub(i):
            if i == start - 1:
                return lambda *_a, **_k: _copy(kept[i])  # the one the first real layer reads: a fresh copy
            return lambda *_a, **_k: kept[i]
        with layers_replaced(layers[:start], stub):
            logits = model(ids, use_cache=False).logits
        self.stats.served += 1
        self.stats.layers_skipped += start
        return logits

    def run_streamed(self, model, batches, *, on_logits=None, cancel=None, progress=None) -> None:
        """run_batches of a streamed model in this cache's scope: through the kept layer inputs when the unpruned
        model is streamed (the unpruned model records, a pruned view of it starts past its unchanged blocks),
        else its whole pass."""
        if self.streamed is None:
            model.run(batches, on_logits=on_logits, cancel=cancel, progress=progress)
            return
        self.streamed.run(model, batches, [self._key(b) for b in batches], on_logits=on_logits, cancel=cancel,
                          progress=progress)

    def close(self) -> None:
        """Remove what this cache kept on disk (streamed; also done when it is collected, or at exit)."""
        if self.streamed is not None:
            self.streamed.close()

    # --- scope ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self):
        """While inside, run_batches in this context (thread or task) goes through this cache."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


def model_layers(model):
    from analysis.archs import adapter_for
    return adapter_for(model).decoder_layers(model)


def scope(cache: PrefixCache | None):
    """cache.active(), or nothing when there is no cache."""
    return cache.active() if cache is not None else contextlib.nullcontext()
