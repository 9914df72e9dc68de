"""Measured head scores: the calibration loss each head costs when removed alone (analysis.shrink.heads.sensitivity)."""
from __future__ import annotations

import torch

from analysis.shrink.heads.strategies.base import HeadStrategy


class MeasuredStrategy(HeadStrategy):
    name, label = "measured", "Measured (Δ loss when removed alone)"
    score_unit = "Δ mean next-token loss on the calibration sequences (nats per token)"
    description = ("Removes each head alone and measures the calibration loss: the heads whose removal costs most "
                   "are kept (one forward pass per head; no interaction between heads is measured).")

    def check_memory(self, model, sequences, tokens, held=0):
        from analysis.shrink.heads.sensitivity import check_removal_memory
        check_removal_memory(model, sequences, tokens, held)

    def scores(self, model, calib, seed=0):
        if "head_removal" not in calib.derived:
            from analysis.shrink.heads.sensitivity import head_removal_losses
            self.check_memory(model, *calib.input_ids.shape, held=calib.held_bytes())  # the encoded split now held
            calib.derived["head_removal"] = head_removal_losses(model, calib.input_ids)
        return [torch.tensor([h["delta"] for h in row], dtype=torch.float64) for row in calib.derived["head_removal"]]
