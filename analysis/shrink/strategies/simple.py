"""Data-free and first-order strategies: random, L1 magnitude, Wanda, gradient (Taylor)."""
from __future__ import annotations

import torch

from analysis.models.load import linear_layers
from analysis.shrink.strategies.base import Strategy, qk_rows, qk_weights


class RandomStrategy(Strategy):
    name, label = "random", "Random"
    score_unit = "uniform draw (unitless)"
    description = "Uniformly random channels per head (seeded); the baseline every method must beat."
    needs_calibration = False

    def scores(self, model, calib, seed=0):
        gen = torch.Generator().manual_seed(seed)
        return [torch.rand(layer.key_heads, layer.key_dim, generator=gen) for layer in linear_layers(model)]


class L1Strategy(Strategy):
    name, label = "l1", "L1 magnitude"
    score_unit = "Σ_j |W_q| + |W_k| (weight units)"
    description = "Row L1 norms of W_q plus W_k: Σ_j |W_q[c,j]| + |W_k[c,j]| (data-free)."
    needs_calibration = False

    def scores(self, model, calib, seed=0):
        return [wq.abs().sum(-1) + wk.abs().sum(-1) for wq, wk in qk_weights(model)]


class WandaStrategy(Strategy):
    name, label = "wanda", "Wanda"
    score_unit = "Σ_j (|W_q| + |W_k|)·‖X_j‖ (weight × input RMS)"
    description = "Σ_j (|W_q[c,j]| + |W_k[c,j]|)·‖X_j‖ with X the attention input (feature-wise RMS)."

    def scores(self, model, calib, seed=0):
        return [((wq.abs() + wk.abs()) * stats.input_rms).sum(-1)
                for (wq, wk), stats in zip(qk_weights(model), calib.layers)]


class GradientStrategy(Strategy):
    name, label = "grad", "Gradient (Taylor)"
    score_unit = "Σ |W ⊙ ∇_W L| (nats, first order)"
    description = "First-order Taylor |W ⊙ ∇_W L| summed per channel over W_q and W_k (calibration loss)."
    needs_gradients = True

    def scores(self, model, calib, seed=0):
        out = []
        for (layer, q, k), (wq, wk), (gq, gk) in zip(qk_rows(model), qk_weights(model), calib.gradients()):
            out.append((wq * layer.blocks(gq, q)).abs().sum(-1) + (wk * layer.blocks(gk, k)).abs().sum(-1))
        return out
