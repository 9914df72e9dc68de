"""What if dk were smaller: keep this head's best dk′ key channels by a pruning strategy and re-run the rules.

Pure channel removal, as the Prune page does it: the dropped channels are zeroed after the short convolution,
before the l2 norm, so a pruned key is l2(mask ⊙ k_raw) when the layer normalises its keys (the same for the
query); v, β and the readout scale (the original dk^-½) do not change, and a per-key-channel decay keeps only
the kept channels' rows, as does a diagonal-plus-low-rank transition's a, b (RWKV-7). The state then has dk′ rows. PCA keeps rotated directions instead (not axis-aligned).
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
    a = b = None
    if selection.dim() == 1:
        idx = selection.long()
        k, q = x.k_raw[:, idx], x.q_raw[:, idx]
        g = x.g[:, idx] if x.g is not None and x.g.dim() == 2 else x.g
        if x.a is not None:
            a, b = _low_rank_kept(x.a, x.b, idx)
    else:
        P = selection.float()
        if x.g is not None and x.g.dim() == 2:
            raise AnalysisError("A rotation cannot keep per-channel decays; pick an axis-aligned strategy.")
        k, q, g = x.k_raw @ P.T, x.q_raw @ P.T, x.g
    if x.unit_keys:
        k, q = l2_normalise(k), l2_normalise(q)
    return x.with_keys(q=q, k=k, g=g, label=label, a=a, b=b)


def _low_rank_kept(a: torch.Tensor, b: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A DPLR transition's a, b [T, dk] on the kept channels. Where a is a unit vector per token (RWKV-7's a = −κ̂,
    b = κ̂ ⊙ α, κ̂ l2-normalised over the head), the pruned layer normalises κ̂ over the kept channels: both are
    divided by ‖a_kept‖ (exact up to the l2 norm's eps, 1e-6 beside Σκ²)."""
    a_kept, b_kept = a[:, idx], b[:, idx]
    norm = a.norm(dim=-1, keepdim=True)
    if bool(torch.allclose(norm[norm > 0], torch.ones(()), atol=1e-3)):
        scale = a_kept.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        a_kept, b_kept = a_kept / scale, b_kept / scale
    return a_kept, b_kept
