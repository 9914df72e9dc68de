"""A plan's predicted loss from a sensitivity map, with a calibrated uncertainty.

Additive model: a plan's loss is the sum over layers of each layer's one-layer-alone loss at its key dim
(Δ log perplexity in nats/token, or the drop in recall accuracy), read from the map as measured (raw: a
small negative "gain" stays, since on the map's own tokens it is what that layer alone did).

Interpolation, per layer: the map's cells are points (x, loss) at x = 1 − dk′/dk, the effective ratio of
the key dim the cell measured, plus (0, 0), the unpruned layer. A plan's layer at a measured x takes
that cell; between measured points it takes the monotone cubic through them (PCHIP, Fritsch–Carlson:
piecewise cubic in the effective ratio, never overshooting its neighbours). A layer's loss grows faster
than linearly in the ratio, so the straight line between two cells over-predicts in between (on the
calibration plans off the grid, by 0.008 nats/token on deltanet-small; PCHIP by 0.004). Past the largest
measured ratio the layer is **outside the grid**: it takes the last cell's loss (pruning more never
costs less, so the prediction is a lower bound there) and the prediction names those layers. A pruned
layer with no measured cell gives no prediction. The standard errors are interpolated linearly.

The map read is the **fitted** map (analysis.shrink.fitted_map: per layer, weighted isotonic regression of the
cells, ≥ 0 and non-decreasing in ρ): the heatmap shows it, this prediction sums it and the allocator minimises
exactly this sum. Its Δ means Δ on **held-out text** (bundled samples: `ppl --split test --max-tokens 16384
--context 256`), not on the map's own tokens.

Uncertainty, one σ, of Δ on held-out text:
  σ² = Σ_l se_l² + (κ Σ_l |loss_l|)² + σ₀² + Σ_l (λ g_l)² + (ζ Σ_l se_l)² + (τ Σ_l ρ_l)².
- se_l: the fitted cell's standard error (1/√Σw of the cells the fit pooled, from their paired SEs over windows;
  interpolated like the loss; absent for a recall map or a map written before it was recorded);
- κ, σ₀: the between-text and additivity terms: a new text moves a plan's Δ by a fraction of it (other plays
  than the map's, other documents) and pruning several layers together is not exactly the sum of each alone;
- g_l = |loss(x₁) − loss(x₀)| · 4t(1 − t) for a layer between its measured points x₀ < x < x₁
  (t = (x − x₀)/(x₁ − x₀)): the interpolation error, zero on a cell and largest midway;
- ζ Σ_l se_l: the selection term. A plan chosen by looking at the map (by eye or by the allocator) picks the cells
  that look cheapest, whose noise is biased low; that bias is about as large as the cells' standard errors and
  adds up across the layers chosen (a sum, not in quadrature);
- τ Σ_l ρ_l: the text term. A layer the map text says is nearly free at ρ 0.875 can cost on other text (the map
  saw 4,096 tokens of a few plays); the shift grows with how much of each layer is pruned, and one new text
  shifts every layer together (a sum). It is what keeps a plan that prunes "free-looking" layers hard honest.
κ, σ₀, λ and ζ were fitted on held-out text (`evidence/plan_calibration.py`,
`sample_models/results/plan-calibration-held-out.json`): random plans, uniform plans, the allocator's and
noise-chasing plans (built like a person reading the raw map: the cheapest-looking cells first) of the bundled
samples, each measured on the test split; each term the least that puts COVERAGE of every sample's plans inside
±2σ. Outside the grid nothing is calibrated: the prediction says so.
"""
from __future__ import annotations

import functools
import math

from analysis.errors import AnalysisError
from analysis.shrink.fitted_map import FIT, fitted
from analysis.models.channel_group import fp32_state_bytes
from analysis.models.key_plan import tiles, tiles_of
from analysis.shrink.number_format import signed, signed_percent

# κ (a fraction of Σ|loss|), the floor σ₀ and λ (a fraction of the interpolation gap g), in the map's loss unit
UNCERTAINTY = {"ppl": {"kappa": 0.22, "floor": 0.003, "interpolation": 0.25, "selection": 0.5, "text": 0.0005},
               "recall": {"kappa": 0.0, "floor": 0.001, "interpolation": 0.06, "selection": 0.0, "text": 0.0}}
COVERAGE = 0.9  # the fraction of each sample's calibration plans the fitted terms put inside ±2σ
INTERPOLATION = ("monotone cubic (PCHIP) in the effective ratio 1 − dk′/dk through the map's measured ratios of "
                 "that layer (ρ = 0 counts as measured, loss 0); past the largest measured ratio the layer is "
                 "outside the grid and takes that ratio's loss, a lower bound")
PREDICTS = {"ppl": "Δ log perplexity on held-out text (bundled samples: the test split, 16,384 tokens, context 256)",
            "recall": "the drop in recall accuracy on the map's synthetic sequences"}
INDISTINGUISHABLE = "these plans are indistinguishable by the map; measure them"


def layer_points(smap: dict) -> list[list[tuple[float, float, float | None, int]]]:
    """Per layer: (x, fitted loss, fitted se, dim) sorted by x = 1 − dk′/dk, starting at (0, 0, 0, dk); two ratios
    that floor to the same dim keep the first measured."""
    smap = fitted(smap)
    rows = smap["layers"]
    out = [[(0.0, 0.0, 0.0, row["head_k_dim"])] for row in rows]
    for p in smap["points"]:
        if p.get("layer") is None or p.get("loss") is None or not math.isfinite(p["loss"]):
            continue
        dk, dim = rows[p["layer"]]["head_k_dim"], p["head_k_dim"]
        if any(q[3] == dim for q in out[p["layer"]]):
            continue
        out[p["layer"]].append((1 - dim / dk, float(p["loss"]), p.get("se"), dim))
    return [sorted(layer) for layer in out]


def layer_loss(points: list[tuple], dk: int, dim: int) -> dict:
    """One layer's loss at key dim `dim` from its points (see the module docstring)."""
    x = 1 - dim / dk
    for _, loss, se, pdim in points:
        if pdim == dim:
            return {"loss": loss, "se": se, "how": "unpruned" if dim == dk else "measured"}
    if len(points) == 1:
        return {"loss": None, "se": None, "how": "not measured"}
    for (x0, l0, s0, _), (x1, l1, s1, _) in zip(points, points[1:]):
        if x0 < x < x1:
            t = (x - x0) / (x1 - x0)
            se = None if s0 is None or s1 is None else s0 + t * (s1 - s0)
            loss = float(_pchip(tuple(p[0] for p in points), tuple(p[1] for p in points))(x))
            return {"loss": loss, "se": se, "how": "interpolated", "gap": abs(l1 - l0) * 4 * t * (1 - t)}
    last = points[-1]
    return {"loss": last[1], "se": last[2], "how": "outside the grid"}


@functools.lru_cache(maxsize=256)
def _pchip(xs: tuple[float, ...], losses: tuple[float, ...]):
    """One layer's monotone interpolant, built once per curve: the allocator asks it at every key dim of a layer."""
    from scipy.interpolate import PchipInterpolator
    return PchipInterpolator(xs, losses)


def plan_state(smap: dict, dims: list[int]) -> dict:
    """fp32 state bytes per sequence and kernel tiles (64 key rows, per head) of key dims `dims`."""
    rows = smap["layers"]
    return {"state_bytes": sum(fp32_state_bytes(r["heads"], d, r["value_dim"]) for r, d in zip(rows, dims)),
            "state_bytes_unpruned": sum(r["state_bytes"] for r in rows),
            "tiles_per_head": tiles(dims),
            "kernel_tiles": sum(r["heads"] * tiles_of(d) for r, d in zip(rows, dims))}


def model_sigma(metric: str, losses: list[float], gaps: list[float], constants: dict | None = None,
                ses: list[float] | None = None, ratios: list[float] | None = None) -> dict:
    """The between-text/additivity, interpolation, selection and text terms of σ (see the module docstring), for
    `constants` or the shipped ones; `ses`: the pruned layers' fitted standard errors; `ratios`: every layer's
    effective ratio."""
    c = constants or UNCERTAINTY[metric]
    return {"additivity": math.hypot(c["kappa"] * sum(abs(x) for x in losses), c["floor"]),
            "interpolation": c["interpolation"] * math.sqrt(sum(g * g for g in gaps)),
            "selection": c.get("selection", 0.0) * sum(ses or []),
            "text": c.get("text", 0.0) * sum(ratios or [])}


def combine(noise: float | None, parts: dict) -> float:
    """σ from the fit noise and model_sigma's terms, in quadrature."""
    return math.sqrt((noise or 0.0) ** 2 + sum(v * v for v in parts.values()))


def predict(smap: dict, dims: list[int], strategy: str | None = None) -> dict:
    """The predicted loss of pruning to key dims `dims` (one per linear-attention layer), its σ, state and tiles.

    JSON-ready. `predicted_delta_nats` / `predicted_uncertainty_nats` for a perplexity map,
    `predicted_delta_recall` / `predicted_uncertainty_recall` (Δ = −loss) for a recall map; `predicted_loss`
    and `predicted_uncertainty` in the map's loss unit for both; None when a pruned layer has no measured cell.
    """
    smap = fitted(smap)
    rows = smap["layers"]
    if len(dims) != len(rows):
        raise AnalysisError(f"The plan has {len(dims)} key dims but the map has {len(rows)} layers; give one per "
                            "linear-attention layer of the model the map was measured on.")
    for layer, (row, d) in enumerate(zip(rows, dims)):
        if not 1 <= d <= row["head_k_dim"]:
            raise AnalysisError(f"Layer {layer}: key dim {d} is outside 1..{row['head_k_dim']}.")
    per_layer = []
    for layer, (row, points, d) in enumerate(zip(rows, layer_points(smap), dims)):
        got = layer_loss(points, row["head_k_dim"], d)
        per_layer.append({"layer": layer, "head_k_dim": d, "ratio": 1 - d / row["head_k_dim"], **got})
    missing = [p["layer"] for p in per_layer if p["loss"] is None]
    outside = [p["layer"] for p in per_layer if p["how"] == "outside the grid"]
    metric = smap["metric"]
    out = {"kind": "plan-prediction", "strategy": strategy or smap["strategy"], "metric": metric,
           "head_k_dims": list(dims), "original_head_k_dims": [r["head_k_dim"] for r in rows],
           "ratios": [p["ratio"] for p in per_layer], "per_layer": per_layer, **plan_state(smap, dims),
           "outside_grid": outside, "not_measured": missing, "interpolation": INTERPOLATION, "fit": FIT,
           "predicts": PREDICTS[metric],
           "map": {"strategy": smap["strategy"], "measure": smap.get("measure"), "ratios": smap["settings"]["ratios"],
                   "baseline": smap["baseline"], "loss": smap.get("loss")}}
    if missing or smap.get("baseline") is None:
        loss = sigma = None
    else:
        losses = [p["loss"] for p in per_layer]
        ses = [p["se"] for p in per_layer if p["how"] != "unpruned"]
        noise = None if any(s is None for s in ses) else math.sqrt(sum(s * s for s in ses))
        parts = model_sigma(metric, losses, [p.get("gap", 0.0) for p in per_layer], ses=[s or 0.0 for s in ses],
                            ratios=[p["ratio"] for p in per_layer])
        loss, sigma = sum(losses), combine(noise, parts)
        out["uncertainty_parts"] = {"map_noise": noise, **parts}
    out["predicted_loss"], out["predicted_uncertainty"] = loss, sigma
    base = smap.get("baseline")
    if metric == "ppl":
        out["predicted_delta_nats"], out["predicted_uncertainty_nats"] = loss, sigma
        out["predicted_ppl_change"] = None if loss is None else math.expm1(loss)
        out["predicted_value"] = None if loss is None else base * math.exp(loss)
    else:
        out["predicted_delta_recall"] = None if loss is None else -loss
        out["predicted_uncertainty_recall"] = sigma
        out["predicted_value"] = None if loss is None else base - loss
    return out


def indistinguishable(a: dict, b: dict) -> bool:
    """Do two predictions overlap within their uncertainty (|Δ₁ − Δ₂| < 2 √(σ₁² + σ₂²))?"""
    if a["predicted_loss"] is None or b["predicted_loss"] is None:
        return False
    return abs(a["predicted_loss"] - b["predicted_loss"]) < 2 * math.hypot(a["predicted_uncertainty"],
                                                                            b["predicted_uncertainty"])


def summary(pred: dict) -> str:
    """One line: the predicted change ± 2σ, state bytes and tiles, and what is outside the grid."""
    if pred["predicted_loss"] is None:
        layers = ", ".join(map(str, pred["not_measured"]))
        return f"no prediction: the map has no measured point for layer {layers} yet"
    loss, sigma = pred["predicted_loss"], pred["predicted_uncertainty"]
    if pred["metric"] == "ppl":
        lo, hi = math.expm1(loss - 2 * sigma), math.expm1(loss + 2 * sigma)
        text = (f"predicted Δ log perplexity {signed(loss)} ± {sigma:.4f} nats/token (1σ), perplexity "
                f"{signed_percent(pred['predicted_ppl_change'])} (±2σ: {signed_percent(lo)} to {signed_percent(hi)})")
    else:
        text = f"predicted Δ recall accuracy {signed(-loss)} ± {sigma:.4f} (1σ)"
    text += f"; state {pred['state_bytes']:,} of {pred['state_bytes_unpruned']:,} fp32 bytes per sequence, " \
            f"{pred['kernel_tiles']} kernel tiles"
    if pred["outside_grid"]:
        text += (f"; layer {', '.join(map(str, pred['outside_grid']))} outside the map's grid (largest measured "
                 f"ρ {max(pred['map']['ratios']):g}): a lower bound there, not calibrated")
    return text
