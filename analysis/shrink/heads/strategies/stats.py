"""Head scores from the calibration states: rank, norm, their joint score (rank-norm), and random."""
from __future__ import annotations

import torch

from analysis.models.load import linear_layers
from analysis.shrink.heads.strategies.base import (HeadStrategy, calibration_statistics,
                                                   check_statistics_memory, standardised)


class RankStrategy(HeadStrategy):
    check_memory = staticmethod(check_statistics_memory)
    name, label = "rank", "Rank (keep low-rank heads)"
    score_unit = "−mean log erank(S) over the second half (nats)"
    description = ("Keeps the heads whose states stay low-rank: score −mean log erank over the second half of the "
                   "calibration sequences (the paper's finding: low-rank heads are indispensable).")

    def scores(self, model, calib, seed=0):
        return [-s["summary"] for s in calibration_statistics(model, calib)]


class NormStrategy(HeadStrategy):
    check_memory = staticmethod(check_statistics_memory)
    name, label = "norm", "Norm (keep large states)"
    score_unit = "mean log ‖S‖_F over the second half"
    description = "Keeps the heads whose states are largest: score mean log ‖S‖_F over the second half."

    def scores(self, model, calib, seed=0):
        return [s["late_log_fro"] for s in calibration_statistics(model, calib)]


class RankNormStrategy(HeadStrategy):
    check_memory = staticmethod(check_statistics_memory)
    name, label = "rank-norm", "Joint rank-norm"
    score_unit = "z(−mean log erank) + z(mean log ‖S‖_F), within the layer"
    description = ("Joint Rank-Norm score (the project's reading of arXiv 2602.02195, whose exact equation was "
                   "not available to us): per layer, the z-score over heads of −mean log erank plus the z-score "
                   "of mean log ‖S‖_F, both over the second half of the calibration sequences. High-rank, "
                   "small-norm heads go first.")

    def scores(self, model, calib, seed=0):
        return [standardised(-s["summary"]) + standardised(s["late_log_fro"])
                for s in calibration_statistics(model, calib)]


class RandomHeadStrategy(HeadStrategy):
    name, label = "random", "Random"
    score_unit = "uniform draw (unitless)"
    description = "Uniformly random heads per layer (seeded): the baseline every head score must beat."
    needs_calibration = False

    def scores(self, model, calib, seed=0):
        gen = torch.Generator().manual_seed(seed)
        return [torch.rand(layer.value_heads, generator=gen) for layer in linear_layers(model)]
