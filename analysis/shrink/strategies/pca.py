"""PCA: keep the top principal directions of the l2-normalised keys. A rotation, NOT axis-aligned.

W_q and W_k are replaced by T W per head (T = top-k eigenvectors of the key covariance). fla's short
convolutions are per channel, so they cannot absorb a rotation exactly: each new channel gets the
squared-loading mix of the old kernels, Σ_d T[r,d]² w[d] (an approximation; the SiLU after the
convolution also breaks exactness). Labelled as such everywhere.
"""
from __future__ import annotations

import torch

from analysis.shrink.strategies.base import Selection, Strategy


class PCAStrategy(Strategy):
    name, label = "pca", "PCA (rotation, not axis-aligned)"
    score_unit = "explained variance (eigenvalue of the key covariance)"
    description = ("Projects queries and keys onto the top principal directions of the normalised keys; "
                   "a rotation, so the per-channel convolutions are only approximately absorbed.")
    axis_aligned = False

    def _eig(self, calib, layer):
        values, vectors = torch.linalg.eigh(calib.layers[layer].key_cov.double())
        return values.flip(-1).float(), vectors.flip(-1).transpose(-1, -2).float()  # descending; rows = directions

    def scores(self, model, calib, seed=0):
        return [self._eig(calib, layer)[0] for layer in range(len(calib.layers))]

    def select(self, model, calib, dims, seed=0):
        out = []
        for layer, k in enumerate(dims):
            values, vectors = self._eig(calib, layer)
            explained = values[:, :k].sum(-1) / values.sum(-1).clamp(min=1e-30)
            out.append(Selection(projection=vectors[:, :k], details={"explained_variance": explained.tolist()}))
        return out
