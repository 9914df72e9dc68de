"""How one family's recurrence is said and written, from its adapter: the update rule, the readout, what enters the
kernel. The pages (Model, State lab, Query noise, Prune) ask this instead of assuming the delta rule, an l2 norm on
q and k, or a readout scale that a family (Mamba-2's SSD) does not have; the update rule itself is the recurrence's
(analysis.runtime.recurrences).
"""
from __future__ import annotations

from dataclasses import dataclass


def readout_latex(scaled: bool) -> str:
    return r"o_t = \mathrm{scale}\cdot S_t^\top q_t,\ \ \mathrm{scale} = d_k^{-1/2}" if scaled else r"o_t = S_t^\top q_t"


@dataclass(frozen=True)
class RecurrenceWords:
    label: str              # the family, e.g. "Gated DeltaNet"
    update: str             # LaTeX of the state update
    readout: str            # LaTeX of the readout
    inputs: str             # what q, k, v (and β, g) are and whether q, k are normalised, in one sentence
    normalised: bool        # q and k are l2-normalised in the kernel
    scaled: bool            # the readout multiplies by dk^-1/2

    @property
    def readout_scale_words(self) -> str:
        """What pruning does to the readout, in words."""
        return ("the pruned model keeps the original readout scale 1/√dₖ, so it equals the original with the dropped "
                "channels zeroed" if self.scaled else
                "this family's readout has no scale (o = Sᵀq), so pruning removes channels and nothing else")


def words(adapter) -> RecurrenceWords:
    """The recurrence of `adapter`'s family (analysis.archs.base.Adapter), said and written."""
    spec = adapter.kernel_spec
    recurrence = spec.recurrence   # analysis.runtime.recurrences: the update rule and what a write does
    if adapter.recurrence_inputs:
        inputs = adapter.recurrence_inputs
    else:
        inputs = (f"{spec.label}, {recurrence.decay_words}: each token writes its value v at its key k"
                  + recurrence.writes
                  + ("; q and k are l2-normalised inside the kernel" if adapter.qk_l2_normalised else
                     "; q and k enter the kernel without normalisation")
                  + ("; the readout multiplies by 1/√dₖ" if adapter.readout_scaled else "; the readout has no scale"))
    return RecurrenceWords(adapter.label, recurrence.update, readout_latex(adapter.readout_scaled),
                           inputs, adapter.qk_l2_normalised, adapter.readout_scaled)
