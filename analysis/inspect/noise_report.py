"""Query-noise summaries shared by the CLI and the dashboard: per-sequence figures, aggregated over sequences
with the median and the interquartile range, predictions labelled with their validity range.

A probe is a set of keys per sequence (one singular direction, or the last real keys). Its relative RMS
retrieval error is taken per sequence (RMS over the keys and the noise samples), then summarised over
sequences: a mean would let one ill-conditioned sequence (Σs²/s_j² ~ 1e10) stand for all of them.
Singular directions beyond a sequence's numerical rank are never probed: there s_j is rounding noise.
"""
from __future__ import annotations

import torch

from analysis.linalg import noise
from analysis.inspect.report import number, numbers
from analysis.inspect.states import StateTrace
from analysis.runtime.cancel import Token, check

DIRECTIONS = (0, 1, 2)  # top singular directions probed by the CLI's Monte Carlo (0-based), within the rank
TAU = 1e-3  # relative threshold of the numerical rank, as in analysis.linalg.rank
NOISE_MODEL = "q = k + ε, ε ~ N(0, σ² I), SNR = ‖k‖²/(dk σ²)"
RAW_FIGURES = ("noise_energy", "worst_case_gain", "kappa", "direction_gain", "predicted_raw", "mc_raw_rms",
               "raw_error_vs_mc")
RENORMALISED_PREDICTIONS = ("first_order", "second_order", "first_order_valid", "second_order_valid",
                            "first_order_valid_from_snr_db", "second_order_valid_from_snr_db")
RENORMALISED_MC = ("mc_rms", "mc_mean", "first_order_error_vs_mc", "second_order_error_vs_mc")
RENORMALISED_FIGURES = RENORMALISED_PREDICTIONS + RENORMALISED_MC


def bounds(qk_l2_normalised: bool) -> dict:
    """Which figures describe the model's own readout, for the JSON and the page. A kernel that l2-normalises q
    and k reads with q̂ = q/‖q‖: every figure applies and the Monte Carlo re-normalises. A kernel that reads its
    state with the raw query (adapter.qk_l2_normalised False): the raw-query figures (exact) apply and the Monte
    Carlo uses the raw query; the re-normalised series describe a unit query the model never forms, so they are
    labelled comparison only."""
    if qk_l2_normalised:
        return {"query_l2_normalised": True, "monte_carlo_query": "re-normalised (q̂ = q/‖q‖, as the kernel reads)",
                "apply_to_this_model": [*RAW_FIGURES, *RENORMALISED_FIGURES], "comparison_only": [],
                "note": "This model's kernel l2-normalises queries and keys: the re-normalised predictions describe "
                        "its own readout; the raw-query figures are the unnormalised reference."}
    return {"query_l2_normalised": False, "monte_carlo_query": "raw (q = k + ε, as the kernel reads it)",
            "apply_to_this_model": list(RAW_FIGURES), "comparison_only": list(RENORMALISED_FIGURES),
            "note": "This model's kernel reads its state with the query as it is (it does not l2-normalise its "
                    "queries and keys): the closed-form figures, the exact raw-query prediction and the raw-query "
                    "Monte Carlo describe it; the re-normalised predictions (and their Monte Carlo) assume a "
                    "unit-length query this model never forms, so they are shown for comparison only."}


def spread(x: torch.Tensor) -> dict:
    """Median and quartiles over the first dim (sequences) of [B, ...], ignoring NaN; lists for JSON."""
    x = x.double()
    q = torch.nanquantile(x, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64, device=x.device), dim=0)
    return {"median": numbers(q[1]), "q25": numbers(q[0]), "q75": numbers(q[2])}


def directions_within_rank(numerical_rank: torch.Tensor, candidates) -> tuple[list[int], str]:
    """(0-based directions j < the smallest numerical rank over sequences, why the others are left out).

    The reason is '' when nothing was left out.
    """
    ranks = [int(r) for r in numerical_rank.reshape(-1).tolist()]
    low = min(ranks) if ranks else 0
    kept = [j for j in candidates if j < low]
    dropped = [j for j in candidates if j >= low]
    if not dropped:
        return kept, ""
    which = [b for b, r in enumerate(ranks) if r == low]
    seq = f"sequence {which[0]}" if len(which) == 1 else f"sequences {', '.join(map(str, which))}"
    return kept, (f"directions j ≥ {low + 1} are beyond the numerical rank of {seq} (rank {low} at τ = {TAU:g}): "
                  f"there sⱼ is rounding noise, so Σs²/sⱼ² and its retrieval error would mean nothing")


def state_table(S: torch.Tensor, n_directions: int = 3) -> list[dict]:
    """One row per sequence of S [B, dk, dv]: numerical rank, ‖S‖_F², s1, κ and Σs²/sⱼ² for j ≤ n_directions;
    None for a direction beyond that sequence's numerical rank (never shown as a number)."""
    a = noise.analytic_noise(S, tau=TAU)
    m = a["singular_values"].shape[-1]
    rows = []
    for b in range(S.shape[0]):
        rank = int(a["numerical_rank"][b])
        row = {"sequence": b, "numerical rank": rank, "‖S‖_F²": number(a["noise_energy"][b]),
               "s₁": number(a["worst_case_gain"][b]), "κ": number(a["kappa"][b])}
        for j in range(min(n_directions, m)):
            row[f"Σs²/s{_sub(j + 1)}²"] = number(a["direction_gain"][b, j]) if j < rank else None
        rows.append(row)
    return rows


def _sub(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def _rms_over_keys(x: torch.Tensor) -> torch.Tensor:
    """[B, n, n_snr] relative errors → [B, n_snr] RMS over the keys of each sequence."""
    return x.double().square().mean(1).sqrt()


def predictions(S: torch.Tensor, keys: torch.Tensor, snr_db) -> dict:
    """Per-sequence analytic RMS errors [B, n_snr] of a probe (keys [B, n, dk]) and where each holds.

    raw: exact; first/second: re-normalised query, first/second order; *_valid_from: [B], the lowest SNR
    at which the truncation is valid for every key of that sequence (inf: nowhere).
    """
    a = noise.analytic_retrieval_error(S, keys, list(snr_db))
    return {"raw": _rms_over_keys(a["rms_error"]), "first": _rms_over_keys(a["rms_error_renorm"]),
            "second": _rms_over_keys(a["rms_error_renorm2"]),
            "first_valid_from": a["renorm_valid_from_snr_db"].double().amax(-1),
            "second_valid_from": a["renorm2_valid_from_snr_db"].double().amax(-1)}


def monte_carlo(S: torch.Tensor, keys: torch.Tensor, snr_db, n_samples: int, renormalize: bool, seed: int,
                cancel: Token = None) -> dict:
    """Per-sequence Monte-Carlo RMS and mean relative error [B, n_snr] of a probe; a fresh generator per call,
    so a probe's numbers do not depend on which probes ran before it. `cancel` is checked before each chunk."""
    mc = noise.monte_carlo_retrieval_error(S, keys, list(snr_db), n_samples, renormalize=renormalize,
                                           generator=torch.Generator().manual_seed(seed),
                                           before_chunk=lambda: check(cancel))
    return {"rms": mc["mean_sq"].double().mean(1).sqrt(), "mean": mc["mean"].double().mean(1)}


def summarize_probe(name: str, snr_db, pred: dict, mc_raw: dict | None = None, mc_renorm: dict | None = None,
                    tol: float = noise.VALIDITY_TOL) -> dict:
    """JSON-ready summary of one probe: median [IQR] over sequences of every curve, the validity range of
    each re-normalised truncation (valid at an SNR only if valid for every sequence), and, with Monte Carlo,
    each prediction's relative error against it (median over sequences of prediction/MC − 1)."""
    snr = [float(s) for s in snr_db]
    out = {"name": name, "predicted_raw": spread(pred["raw"]), "first_order": spread(pred["first"]),
           "second_order": spread(pred["second"]), "validity_tol": tol}
    for order in ("first", "second"):
        start = number(pred[f"{order}_valid_from"].max())
        out[f"{order}_order_valid_from_snr_db"] = start
        out[f"{order}_order_valid"] = [start is not None and s >= start for s in snr]
    if mc_raw is not None:
        out["mc_raw_rms"] = spread(mc_raw["rms"])
        out["raw_error_vs_mc"] = spread(pred["raw"] / mc_raw["rms"] - 1)["median"]
    if mc_renorm is not None:
        out["mc_rms"] = spread(mc_renorm["rms"])
        out["mc_mean"] = spread(mc_renorm["mean"])
        for order in ("first", "second"):
            out[f"{order}_order_error_vs_mc"] = spread(pred[order] / mc_renorm["rms"] - 1)["median"]
    return out


def noise_report(trace: StateTrace, snr_db: list[float], n_samples: int = 256, seed: int = 0,
                 progress=None, qk_l2_normalised: bool = True, directions=DIRECTIONS) -> dict:
    """Per layer and head, the final state's noise figures and retrieval errors, median [IQR] over the batch
    (progress(layers_done, layers) after each layer). qk_l2_normalised=False (the model's kernel does not
    l2-normalise q and k): the Monte Carlo uses the raw query, and the report lists the re-normalised figures as
    comparison only (`bounds`). directions: the 0-based singular directions probed by Monte Carlo (those within
    the numerical rank)."""
    labels = bounds(qk_l2_normalised)
    if not qk_l2_normalised:  # its Monte Carlo is the raw query's: no re-normalised MC figures in this report
        labels["comparison_only"] = list(RENORMALISED_PREDICTIONS)
    layers = []
    for index, layer in enumerate(trace.layers):
        S = layer.states[:, :, -1] if layer.states is not None else layer.final_state      # [B, H, dk, dv]
        analytic = noise.analytic_noise(S, tau=TAU)
        heads = []
        for h in range(S.shape[1]):
            Sh = S[:, h]
            dirs, skipped = directions_within_rank(analytic["numerical_rank"][:, h], directions)
            entry = {"head": h, "numerical_rank": numbers(analytic["numerical_rank"][:, h]),
                     "noise_energy": spread(analytic["noise_energy"][:, h]),
                     "worst_case_gain": spread(analytic["worst_case_gain"][:, h]),
                     "kappa": spread(analytic["kappa"][:, h]),
                     "direction_gain": [{"direction": j + 1, **spread(analytic["direction_gain"][:, h, j])}
                                        for j in dirs],
                     "directions_skipped": skipped or None, "mc_singular": []}
            for j in dirs:
                keys = noise.singular_direction_keys(Sh, [j])                                # [B, 1, dk]
                entry["mc_singular"].append({"direction": j + 1, **_probe(f"direction {j + 1}", Sh, keys, snr_db,
                                                                         n_samples, seed, qk_l2_normalised)})
            if layer.keys is not None:
                entry["mc_real_keys"] = _probe(f"real keys (last {layer.keys.shape[2]})", Sh, layer.keys[:, h],
                                               snr_db, n_samples, seed, qk_l2_normalised)
            heads.append(entry)
        layers.append({"layer": index, "heads": heads})
        if progress:
            progress(index + 1, len(trace.layers))
    return {"snr_db": list(snr_db), "samples": n_samples, "seed": seed, "tau": TAU,
            "noise_model": NOISE_MODEL + ("; Monte Carlo with the query re-normalised as in the kernel"
                                          if qk_l2_normalised else "; Monte Carlo with the raw query, as this "
                                          "model's scan reads it (it does not l2-normalise queries and keys)"),
            **labels,
            "applicable_bounds": ("all" if qk_l2_normalised else
                                  f"raw query only ({', '.join(RAW_FIGURES)}); the re-normalised predictions "
                                  f"({', '.join(RENORMALISED_FIGURES[:2])}) assume an l2 norm this model lacks: "
                                  "comparison only"),
            "aggregate": "median, q25 and q75 over the sequences of the batch (per sequence: RMS over keys and "
                         "noise samples)",
            "validity": f"a re-normalised prediction is valid where its first neglected term moves the predicted "
                        f"RMS by at most {noise.VALIDITY_TOL:.0%} (valid_from_snr_db: lowest valid SNR)"
                        + ("" if qk_l2_normalised else "; comparison only for this model (no l2 norm)"),
            "layers": layers}


def _probe(name: str, S: torch.Tensor, keys: torch.Tensor, snr_db, n_samples: int, seed: int,
           qk_l2_normalised: bool = True) -> dict:
    """One probe's summary with the Monte Carlo of the query the model reads: re-normalised where its kernel
    l2-normalises, raw otherwise; `mean` is the median over sequences of that Monte Carlo's mean relative error."""
    pred = predictions(S, keys, snr_db)
    mc = monte_carlo(S, keys, snr_db, n_samples, qk_l2_normalised, seed)
    if qk_l2_normalised:
        out = summarize_probe(name, snr_db, pred, mc_renorm=mc)
        out["mean"] = out["mc_mean"]["median"]
    else:
        out = summarize_probe(name, snr_db, pred, mc_raw=mc)
        out["mean"] = spread(mc["mean"])["median"]
    out["monte_carlo_query"] = "re-normalised" if qk_l2_normalised else "raw"
    return out
