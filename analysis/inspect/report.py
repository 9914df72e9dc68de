"""JSON-ready summaries of traces, shared by the CLI and the dashboard (NaN becomes null)."""
from __future__ import annotations

import math

import torch

from analysis.io.json_out import finite_json, write_json  # noqa: F401  (torch-free there, for `models`)
from analysis.linalg.rank import METRIC_INFO
from analysis.inspect.states import StateTrace

SCALAR_METRICS = list(METRIC_INFO)


def number(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def numbers(t: torch.Tensor) -> list:
    return [number(v) for v in t.flatten().tolist()] if t.dim() <= 1 else [numbers(r) for r in t]


def rank_report(trace: StateTrace, meta: dict, trace_metric: str = "rank_utilization") -> dict:
    """Final-state metrics per layer/head (mean over the batch) and the metric's trace over positions."""
    layers = []
    for index, layer in enumerate(trace.layers):
        final = {k: layer.metrics[k][:, :, -1].float().nanmean(0) for k in SCALAR_METRICS}   # [H]
        heads = [{"head": h, **{k: number(final[k][h]) for k in SCALAR_METRICS}}
                 for h in range(len(final[SCALAR_METRICS[0]]))]
        dk, dv = layer.final_state.shape[-2:]
        layers.append({"layer": index, "head_k_dim": dk, "head_v_dim": dv, "heads": heads,
                       "mean": {k: number(final[k].nanmean()) for k in SCALAR_METRICS}})
    return {
        **meta,
        "tokens": trace.tokens,
        "batch": trace.batch,
        "positions": trace.positions,
        "final_state": "metrics of the state after the last token, mean over the batch",
        "layers": layers,
        "trace": {"metric": trace_metric, "positions": trace.positions,
                  **position_stats(trace.metric(trace_metric))},
    }


def position_stats(values: torch.Tensor) -> dict:
    """A metric over positions [L, B, H, P]: per layer and head (mean over the batch), and the mean and
    standard deviation over all layers, heads and sequences at each position."""
    values = values.float()
    flat = values.permute(3, 0, 1, 2).reshape(values.shape[-1], -1)  # [P, L·B·H]
    mean = flat.nanmean(1)
    std = (flat - mean[:, None]).square().nanmean(1).sqrt()
    return {"per_layer_head": numbers(values.nanmean(1)), "mean": numbers(mean), "std": numbers(std)}


def every_token_report(layers: list[dict], tol: float) -> dict:
    """The dense rank-utilization trace of `analysis.inspect.rank_trace` (state after every token, every layer)."""
    values = torch.stack([layer["rank_utilization"] for layer in layers])  # [L, B, H, T]
    if all(layer.get("exact") for layer in layers):   # analysis.inspect.rank_trace: no scalar decay to track through
        method, steps = ("s1 from an SVD of every state (the layers' transitions are not a scalar decay plus a "
                         "rank-one write, which the tracker needs), ‖S‖_F exact; states in float32"), None
    else:
        method = (f"s1 tracked by warm-started Rayleigh–Ritz (never above the true s1; stops at an estimated error "
                  f"of {tol:g} in u), ‖S‖_F exact; states in float32")
        steps = number(torch.stack([layer["mean_ritz_steps"] for layer in layers]).mean())
    return {"metric": "rank_utilization", "positions": list(range(values.shape[-1])), "method": method,
            "mean_ritz_steps": steps, **position_stats(values)}
