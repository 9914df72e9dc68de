"""Pure tables and exports of the Shrink pages: the before/after comparison, sweep results as CSV/JSON."""
from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

MISSING = "—"


def perplexity_label(ppl: dict) -> str:
    """The perplexity row names everything that sets its value."""
    return (f"perplexity ({ppl['dataset']}, context {ppl['context']}, stride {ppl['stride']}, "
            f"{ppl['tokens']:,} tokens)")


def kernel_label(point: dict) -> str:
    return (f"{point['op']} kernel, B{point['batch']} T{point['tokens']} H{point['heads']} dk{point['key_dim']} "
            f"dv{point['value_dim']}, {point['dtype']} on {point['device_name']} ({point['timer']})")


def _rows(m: dict) -> dict[str, str]:
    rows = {"key dim per head, by layer": ", ".join(str(d) for d in m["head_k_dims"]),
            "64-row tiles per head, by layer": ", ".join(str(t) for t in m["tiles"])}
    if "perplexity" in m:
        ppl = m["perplexity"]
        rows[perplexity_label(ppl)] = f"{ppl['perplexity']:.3f}"
        rows["bits per byte"] = f"{ppl['bits_per_byte']:.4f}"
    if "recall" in m:
        n = m["recall"]["sequences_per_point"]
        for r in m["recall"]["by_pairs"]:
            rows[f"recall accuracy, {r['pairs']} pairs ({n} sequences)"] = f"{r['accuracy']:.3f}"
    rows["parameters"] = f"{m['parameters']:,}"
    rows["fp32 state bytes per sequence"] = f"{m['state_bytes_per_sequence']:,}"
    if "kernel" in m:
        rows["kernel time at the layer-0 key dim (ms, median)"] = f"{m['kernel']['ms']:.3f}"
    return rows


def before_after_table(columns: dict[str, dict]) -> pd.DataFrame:
    """One column per measurement (e.g. before / after / after recovery), one row per quantity."""
    per_column = {name: _rows(m) for name, m in columns.items()}
    order = list(dict.fromkeys(row for rows in per_column.values() for row in rows))
    table = pd.DataFrame({name: [rows.get(r, MISSING) for r in order] for name, rows in per_column.items()},
                         index=order)
    table.index.name = "quantity"
    return table


def _flat(point: dict) -> dict:
    return {k: (", ".join(str(x) for x in v) if isinstance(v, (list, tuple)) else v) for k, v in point.items()}


def points_csv(points: Sequence[dict]) -> str:
    """Sweep or latency points as CSV (per-layer lists joined with ', ')."""
    return pd.DataFrame([_flat(p) for p in points]).to_csv(index=False)


def points_json(points: Sequence[dict], settings: dict) -> str:
    return json.dumps({"settings": settings, "results": list(points)}, indent=2, default=str)
