"""How one family's recurrence is said and written, from its adapter: the update rule, the readout, what enters the
kernel. The pages (Model, State lab, Query noise, Prune) ask this instead of assuming the delta rule, an l2 norm on
q and k, or a readout scale that a family (Mamba-2's SSD) does not have.
"""
from __future__ import annotations

from dataclasses import dataclass

DECAYS = {"none": "", "head": r"e^{g_t}\, ", "channel": r"\mathrm{Diag}(e^{g_t})\, "}  # base.GATES → D_t


def update_latex(gate: str, delta: bool, low_rank: bool = False) -> str:
    """The layer's own state update (decay first, then the write) in LaTeX: a delta rule, plain linear attention,
    or a diagonal-plus-low-rank transition (RWKV-7)."""
    if low_rank:
        return r"S_t = \left(\mathrm{Diag}(e^{g_t}) + b_t a_t^\top\right) S_{t-1} + k_t v_t^\top"
    if not delta:
        return rf"S_t = {DECAYS[gate]}S_{{t-1}} + k_t v_t^\top"
    return rf"S_t = (I - \beta_t k_t k_t^\top)\, {DECAYS[gate]}S_{{t-1}} + \beta_t k_t v_t^\top"


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
    gate = {"none": "no decay", "head": "one decay per head", "channel": "one decay per key channel"}[adapter.gate]
    if adapter.recurrence_inputs:
        inputs = adapter.recurrence_inputs
    else:
        inputs = (f"{spec.label}, {gate}: each token writes its value v at its key k"
                  + (" with strength β" if spec.delta else "")
                  + (" through a diagonal-plus-low-rank transition Diag(e^g) + b aᵀ" if spec.low_rank else "")
                  + ("; q and k are l2-normalised inside the kernel" if adapter.qk_l2_normalised else
                     "; q and k enter the kernel without normalisation")
                  + ("; the readout multiplies by 1/√dₖ" if adapter.readout_scaled else "; the readout has no scale"))
    return RecurrenceWords(adapter.label, update_latex(adapter.gate, spec.delta, spec.low_rank), readout_latex(adapter.readout_scaled),
                           inputs, adapter.qk_l2_normalised, adapter.readout_scaled)
