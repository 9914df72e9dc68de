"""JSON-ready query-noise summary of a trace's final states: analytic figures and Monte Carlo vs SNR."""
from __future__ import annotations

import torch

from analysis import noise
from analysis.report import number, numbers
from analysis.states import StateTrace

DIRECTIONS = (0, 1, 2)  # top singular directions probed by the Monte Carlo


def noise_report(trace: StateTrace, snr_db: list[float], n_samples: int = 256, seed: int = 0) -> dict:
    """Per layer and head, means over the batch of the final state's noise figures and retrieval errors."""
    gen = torch.Generator().manual_seed(seed)
    layers = []
    for index, layer in enumerate(trace.layers):
        S = layer.states[:, :, -1] if layer.states is not None else layer.final_state      # [B, H, dk, dv]
        analytic = noise.analytic_noise(S)
        dirs = [j for j in DIRECTIONS if j < min(S.shape[-2:])]
        dir_keys = noise.singular_direction_keys(S, dirs)                                  # [B, H, j, dk]
        mc_dir = noise.monte_carlo_retrieval_error(S, dir_keys, snr_db, n_samples, renormalize=True, generator=gen)
        pred_dir = noise.analytic_retrieval_error(S, dir_keys, snr_db)
        heads = []
        for h in range(S.shape[1]):
            entry = {"head": h, "noise_energy": number(analytic["noise_energy"][:, h].mean()),
                     "worst_case_gain": number(analytic["worst_case_gain"][:, h].mean()),
                     "kappa": number(analytic["kappa"][:, h].mean()),
                     "direction_gain": numbers(analytic["direction_gain"][:, h, :len(dirs)].mean(0)),
                     "mc_singular": [{"direction": j, "mean": numbers(mc_dir["mean"][:, h, i].mean(0)),
                                      "std": numbers(mc_dir["std"][:, h, i].mean(0)),
                                      "first_order": numbers(pred_dir["rms_error_renorm"][:, h, i].mean(0))}
                                     for i, j in enumerate(dirs)]}
            if layer.keys is not None:
                keys = layer.keys[:, h]                                                    # [B, n, dk]
                mc_keys = noise.monte_carlo_retrieval_error(S[:, h], keys, snr_db, n_samples, renormalize=True,
                                                            generator=gen)
                pred = noise.analytic_retrieval_error(S[:, h], keys, snr_db)
                entry["mc_real_keys"] = {"mean": numbers(mc_keys["mean"].mean((0, 1))),
                                         "first_order": numbers(pred["rms_error_renorm"].mean((0, 1)))}
            heads.append(entry)
        layers.append({"layer": index, "heads": heads})
    return {"snr_db": list(snr_db), "samples": n_samples,
            "noise_model": "q = k + ε, ε ~ N(0, σ² I), SNR = ‖k‖²/(dk σ²); query re-normalised as in the kernel",
            "layers": layers}
