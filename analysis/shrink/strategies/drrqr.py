"""DRRQR: strong rank-revealing QR (Gu–Eisenstat) on the activations that enter the recurrence."""
from __future__ import annotations

import numpy as np
import torch

from analysis.models.load import linear_layers
from analysis.linalg.rrqr import strong_rrqr
from analysis.shrink.strategies.base import Selection, Strategy

RRQR_F = 1.5


class DRRQRStrategy(Strategy):
    name, label = "drrqr", "DRRQR (strong RRQR)"
    score_unit = "RRQR pivot order (dk = first pivot)"
    description = ("Columns of the stacked post-conv query/key activations [A_q; A_k] chosen by strong RRQR "
                   "(f = 1.5): the kept channels have well-conditioned activations.")

    def scores(self, model, calib, seed=0):
        """Preview score: position in the column-pivoted QR order (first pivot = highest score)."""
        out = []
        for layer, info in enumerate(linear_layers(model)):
            dk = info.key_dim
            heads = []
            for h in range(info.key_heads):
                result = strong_rrqr(calib.drrqr_matrix(layer, h, seed).numpy(), dk, f=RRQR_F)
                score = torch.empty(dk)
                score[torch.from_numpy(np.asarray(result.order))] = torch.arange(dk, 0, -1, dtype=torch.float)
                heads.append(score)
            out.append(torch.stack(heads))
        return out

    def select(self, model, calib, dims, seed=0):
        selections = []
        for layer, (info, k) in enumerate(zip(linear_layers(model), dims)):
            kept, details = [], []
            for h in range(info.key_heads):
                r = strong_rrqr(calib.drrqr_matrix(layer, h, seed).numpy(), k, f=RRQR_F)
                kept.append(torch.as_tensor(np.sort(r.kept)))
                details.append({"head": h, "swaps": r.swaps, "max_rho": r.max_rho, "converged": r.converged,
                                "sigma_min_kept": r.sigma_min_kept})
            selections.append(Selection(indices=torch.stack(kept), details={"rrqr": details}))
        return selections
