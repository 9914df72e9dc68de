"""What if dk were smaller: keep this head's best dk′ key channels by a pruning strategy and re-run the rules.

Pure channel removal, as the Prune page does it: the dropped channels are zeroed after the short convolution,
before the l2 norm, so a pruned key is l2(mask ⊙ k_raw) when the layer normalises its keys (the same for the
query); v, β and the readout scale (the original dk^-½) do not change, and a per-key-channel decay keeps only
the kept channels' rows, as does a diagonal-plus-low-rank transition's a, b (RWKV-7): the head's recurrence says which
(`Recurrence.kept`). The state then has dk′ rows. PCA keeps rotated directions instead (not axis-aligned).
"""
from __future__ import annotations

import torch

from analysis.errors import AnalysisError
from analysis.inspect.state_lab.observe import l2_normalise
from analysis.inspect.state_lab.rules import HeadInputs


def pruned_inputs(x: HeadInputs, selection: torch.Tensor, label: str) -> HeadInputs:
    """The head's inputs with only the selected key channels (1-D indices) or directions (2-D projection)."""
    if x.k_raw is None or x.q_raw is None:
        raise AnalysisError("This head's inputs carry no pre-normalisation keys, so it cannot be pruned here.")
    if selection.dim() == 1:
        idx = selection.long()
        k, q = x.k_raw[:, idx], x.q_raw[:, idx]
        g, a, b = x.recurrence.kept(x.g, x.a, x.b, idx)
    else:
        P = selection.float()
        k, q, g, a, b = x.k_raw @ P.T, x.q_raw @ P.T, x.recurrence.rotated(x.g), None, None
    if x.unit_keys:
        k, q = l2_normalise(k), l2_normalise(q)
    return x.with_keys(q=q, k=k, g=g, label=label, a=a, b=b)
