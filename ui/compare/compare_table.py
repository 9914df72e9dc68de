"""The side-by-side's difference table (pure: numpy, pandas and the core's noise figures; no streamlit).

One row per layer and head: the key dims dk → dk′, the final state's effective rank (mean over the sequences,
as the heatmap) and its noise gain, each for the loaded model, the comparison model and their difference.
The noise gain is the exact relative RMS retrieval error of the last real keys for a raw query at 0 dB SNR
(analysis.inspect.noise_report.predictions; the error scales as 10^(−SNR/20), so at 0 dB it is the gain itself),
median over the sequences as on the Query noise page.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from analysis.inspect import noise_report

GAIN_SNR_DB = 0.0


def noise_gain(trace: dict) -> np.ndarray:
    """[L, H]: median over sequences of the exact raw-query relative RMS error of the last real keys at 0 dB."""
    out = []
    for S, keys in zip(trace["final_states"], trace["keys"]):          # [B, H, dk, dv], [B, H, n, dk]
        # nanmedian: the middle of an even count is the mean of the two middle values, as on the Query noise page
        # (torch's median would take the lower one)
        per_head = [np.nanmedian(noise_report.predictions(torch.from_numpy(S[:, h]), torch.from_numpy(keys[:, h]),
                                                          [GAIN_SNR_DB])["raw"][:, 0].numpy()) for h in range(S.shape[1])]
        out.append(per_head)
    return np.asarray(out, dtype=float)


def effective_rank(trace: dict) -> np.ndarray:
    """[L, H]: the final state's effective rank, mean over the sequences."""
    return trace["metrics"]["effective_rank"][..., -1].mean(axis=1)


def delta_table(original: dict, other: dict, dims: list[int], other_dims: list[int], other_role: str) -> pd.DataFrame:
    """Rows (layer, head): dk → dk′ and both figures for both models with their difference (other − original)."""
    rank_a, rank_b = effective_rank(original), effective_rank(other)
    gain_a, gain_b = noise_gain(original), noise_gain(other)
    rows = []
    for layer in range(rank_a.shape[0]):
        for head in range(rank_a.shape[1]):
            rows.append({"layer": layer, "head": head, "dk → dk′": f"{dims[layer]} → {other_dims[layer]}",
                         "effective rank: original": rank_a[layer, head],
                         f"effective rank: {other_role}": rank_b[layer, head],
                         "Δ effective rank": rank_b[layer, head] - rank_a[layer, head],
                         "noise gain: original": gain_a[layer, head],
                         f"noise gain: {other_role}": gain_b[layer, head],
                         "Δ noise gain": gain_b[layer, head] - gain_a[layer, head]})
    return pd.DataFrame(rows)
