"""Layer-prefix reuse for a streamed model: a point starts at its first changed layer and reads only the blocks from
there on (analysis.models.prefix dispatches here when its unpruned model is streamed).

- The unpruned streamed model's pass keeps each decoder layer's input (its hidden state and whatever the layers
  carry, e.g. RWKV-7's v_first), per batch of windows, on disk (analysis.io.kept_states: the project's cache area,
  each file written atomically, bounded by half the free disk space; a state that does not fit is not kept).
  In memory a pass holds what it always holds (one batch's state being written at a time).
- A pruned view of it (analysis.shrink.prune_streamed: a DerivedSkeleton over the same checkpoint) starts each
  batch at its first changed layer l on the kept input of layer l (or of the latest kept layer before l; none:
  from the start, the whole pass) and reads the blocks from there on; its own embeddings still run in the capture,
  so the arguments each layer gets (masks, rotary embeddings) are its own forward's, as ever.
- The first changed layer comes from the view's declared edits (the tensors its prune computes anew) and its
  shapes: the first block holding an edited tensor or a tensor of another shape; an edit outside the blocks
  (embeddings, final norm, head), another source checkpoint or another depth: start 0.

Exact: layers before l have the unpruned model's weights (nothing edited, same shapes) and inputs, so their output
at l is the kept tensor, bit for bit; from l on the view runs as a whole pass would (tests/models/test_stream_reuse.py).
"""
from __future__ import annotations

import weakref

from analysis.io.kept_states import KeptStates


def _signature(unit) -> list:
    return sorted((full, tuple(meta.shape), str(meta.dtype)) for *_, meta, full in unit.slots)


class StreamedPrefix:
    """The kept layer inputs of one unpruned streamed model for one set of points (see the module docstring).

    stats: the PrefixStats the owning analysis.models.prefix.PrefixCache reports; fill_on_miss: a view meeting
    batches the unpruned model has not run yet first runs it on them (one extra pass without the LM head)."""

    def __init__(self, base, stats, fill_on_miss: bool = False, kept: KeptStates | None = None):
        self.base, self.stats, self.fill_on_miss = base, stats, fill_on_miss
        self.depth = len(base.skeleton.layers)
        self.kept = kept if kept is not None else KeptStates()
        self._number: dict = {}          # batch key -> its number among the kept files
        self._seen: set = set()          # batch keys the unpruned model has run
        self._starts = weakref.WeakKeyDictionary()

    # --- where a view starts ------------------------------------------------------------------------------------
    def first_changed(self, model) -> int:
        if model is self.base:
            return self.depth
        known = self._starts.get(model)
        if known is None:
            known = self._starts[model] = self._compare(model)
            self.stats.starts.append(known)
        return known

    def _compare(self, model) -> int:
        sk, source = getattr(model, "skeleton", None), self.base.skeleton
        if sk is None or getattr(sk, "source", None) is not source or len(sk.layers) != self.depth:
            return 0
        changed = getattr(sk, "changed", None)
        if changed is None:
            return 0
        start = self.depth
        for unit in sk.units:
            try:
                mine = source.unit(unit.name)
            except (KeyError, ValueError, StopIteration):
                return 0
            edited = any(full in changed for *_, full in unit.slots)
            if edited or _signature(unit) != _signature(mine):
                if unit.block is None:
                    return 0  # embeddings, final norm or head differ: nothing is shared
                start = min(start, unit.block)
        return start

    # --- running ------------------------------------------------------------------------------------------------
    def _keeper(self, keys: list):
        def keep(layer: int, m: int, tensors) -> None:
            number = self._number.setdefault(keys[m], len(self._number))
            if self.kept.has(number, layer):
                return
            if not self.kept.put(number, layer, tensors):
                self.stats.not_kept += 1
        return keep

    def _begin(self, key, start: int):
        """(layer, tensors) to start a batch at: its latest kept layer input at or before `start`, or None."""
        number = self._number.get(key)
        if number is None:
            return None
        for layer in range(start, 0, -1):
            tensors = self.kept.get(number, layer)
            if tensors is not None:
                return layer, tensors
        return None

    def run(self, model, batches, keys: list, *, on_logits=None, cancel=None, progress=None) -> None:
        """run_batches for a streamed model inside the cache's scope: the unpruned model records, a view of it
        starts past its unchanged blocks, anything else runs its whole pass."""
        if model is self.base:
            fresh = any(k not in self._seen for k in keys)
            model.run(batches, on_logits=on_logits, cancel=cancel, progress=progress,
                      keep=self._keeper(keys) if fresh else None)
            self.stats.blocks_read += model.last_run.get("blocks_read", self.depth)
            self.stats.recorded += sum(k not in self._seen for k in keys)
            self._seen.update(keys)
            return
        start = self.first_changed(model)
        if start > 0 and self.fill_on_miss:
            missing = [i for i, k in enumerate(keys) if k not in self._seen]
            if missing:  # the unpruned model's pass over them, without the LM head: kept for every later point
                self.base.run([batches[i] for i in missing], cancel=cancel, keep=self._keeper([keys[i] for i in missing]))
                self.stats.recorded += len(missing)
                self.stats.blocks_read += self.base.last_run.get("blocks_read", self.depth)
                self._seen.update(keys[i] for i in missing)
        begin = [self._begin(k, start) if start > 0 else None for k in keys]
        model.run(batches, on_logits=on_logits, cancel=cancel, progress=progress, begin=begin)
        served = [b for b in begin if b is not None]
        self.stats.served += len(served)
        self.stats.whole += len(begin) - len(served)
        self.stats.layers_skipped += sum(layer for layer, _ in served)
        self.stats.blocks_read += model.last_run.get("blocks_read", self.depth)
        self.stats.blocks_skipped += self.depth - model.last_run.get("blocks_read", self.depth)

    def close(self) -> None:
        self.kept.close()
