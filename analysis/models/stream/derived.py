"""A skeleton whose units are computed from another skeleton's: a pruned model that is never held whole.

Materialising a unit materialises the same unit of the source (read from its checkpoint), hands its tensors to
`transform(unit name, {full name: tensor})` — e.g. the q/k rows a prune keeps — and loads the result; the source
unit is released at once. The units keep their names: the derived model has the source's architecture with
other sizes.
"""
from __future__ import annotations

import torch

from analysis.models.stream.skeleton import Skeleton, Unit


class DerivedSkeleton(Skeleton):

    def __init__(self, model, source: Skeleton, decoder_layers, dtype: torch.dtype, transform, changed: set):
        """`changed`: the full names `transform` computes anew; every other tensor passes through as it is read."""
        super().__init__(model, None, decoder_layers, dtype)
        self.source, self.transform = source, transform
        self.lock = source.lock   # a derived unit materialises its source's: one pass at a time over both
        self.files = source.files  # what is read, and how much (progress, the shard sizes of a save)
        for unit in self.units:  # while a changed unit is derived, its source unit is held too
            unit.stored_bytes = source.unit(unit.name).stored_bytes
            if any(full in changed for *_, full in unit.slots):
                unit.nbytes += source.unit(unit.name).nbytes
        self.changed = set(changed)
        self.plan_rows()

    def row_source(self, unit: Unit):
        """A unit the transform leaves alone is read by rows from the source's checkpoint, as the source's is."""
        if not hasattr(self, "changed") or any(full in self.changed for *_, full in unit.slots):
            return None
        return self.source.row_source(self.source.unit(unit.name))

    def _load(self, unit: Unit) -> None:
        src = self.source.unit(unit.name)
        with self.source.materialized(src):
            values = self.transform(unit.name, self.source.values(src))
        self.set_values(unit, values)
