"""JSON-ready summaries of traces, shared by the CLI and the dashboard (NaN becomes null)."""
from __future__ import annotations

import json
import math
import sys

import torch

from analysis.rank import METRIC_INFO
from analysis.safe_io import write_text
from analysis.states import StateTrace

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
    """The dense rank-utilization trace of `analysis.rank_trace` (state after every token, every layer)."""
    values = torch.stack([layer["rank_utilization"] for layer in layers])  # [L, B, H, T]
    return {"metric": "rank_utilization", "positions": list(range(values.shape[-1])),
            "method": f"s1 tracked by warm-started Rayleigh–Ritz (never above the true s1; stops at an "
                      f"estimated error of {tol:g} in u), ‖S‖_F exact; states in float32",
            "mean_ritz_steps": number(torch.stack([layer["mean_ritz_steps"] for layer in layers]).mean()),
            **position_stats(values)}


def finite_json(value, where: str = "$", bad: list | None = None):
    """A copy of `value` with every non-finite float (NaN, ±inf) replaced by None; `bad` collects where."""
    bad = [] if bad is None else bad
    if isinstance(value, float) and not math.isfinite(value):
        bad.append(where)
        return None
    if isinstance(value, dict):
        return {k: finite_json(v, f"{where}.{k}", bad) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v, f"{where}[{i}]", bad) for i, v in enumerate(value)]
    return value


def write_json(payload: dict, destination: str) -> None:
    """`-` prints to stdout; a path is written atomically through analysis.safe_io (symlinks written through,
    FIFOs and devices written to, normal permissions). NaN/inf become null, with a warning on stderr."""
    bad: list = []
    text = json.dumps(finite_json(payload, bad=bad), indent=2, allow_nan=False)
    if bad:
        shown = ", ".join(w.removeprefix("$.") for w in bad[:4]) + (", …" if len(bad) > 4 else "")
        print(f"warning: {len(bad)} value(s) are not finite (NaN or inf) and are written as null: {shown}",
              file=sys.stderr)
    if destination == "-":
        print(text)
        return
    write_text(destination, text + "\n")
