"""Pure tables and exports of the Shrink pages: the before/after comparison, sweep and latency tables, CSV/JSON."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pandas as pd

from analysis.shrink.number_format import signed

MISSING = "—"


def perplexity_label(ppl: dict) -> str:
    """The perplexity row names everything that sets its value."""
    return (f"perplexity ({ppl['dataset']}, context {ppl['context']}, stride {ppl['stride']}, "
            f"{ppl['tokens']:,} tokens)")


KERNEL_ROW = "kernel time, whole model: Σ over layers at each layer's dk (ms, medians)"


class StandardError(float):
    """A measurement's standard error (the harness's), as opposed to a timing's IQR: a change within twice the
    combined standard error of the two measurements is called noise."""


def task_label(name: str, t: dict) -> str:
    """An lm-evaluation-harness accuracy row names the task, metric, docs and shots that set its value."""
    return f"{name}: {t['metric']} ({t['docs']:,} docs, {t['num_fewshot']}-shot; ± harness standard error)"


def kernel_label(point: dict) -> str:
    dims = point.get("key_dims", [point.get("key_dim")])
    heads = point.get("value_heads")
    heads = f"H {', '.join(map(str, heads))} (one per layer)" if heads and len(set(heads)) > 1 else f"H{point['heads']}"
    return (f"{point['op']} kernel, B{point['batch']} T{point['tokens']} {heads} "
            f"dk {', '.join(map(str, dims))} (one per layer) dv{point['value_dim']}, {point['dtype']} on "
            f"{point['device_name']} ({point['timer']})")


def _rows(m: dict) -> dict[str, tuple]:
    """label → (value, format[, spread]); numbers keep their type so the table can take differences; a timing
    carries its spread (IQR), so a change smaller than the spread is called noise, not a speed-up."""
    rows = {"key dim per head, by layer": (", ".join(str(d) for d in m["head_k_dims"]), None),
            "64-row tiles per head, by layer": (", ".join(str(t) for t in m["tiles"]), None)}
    if m.get("value_heads_per_layer"):   # a head prune changes them
        rows["value heads, by layer"] = (", ".join(str(h) for h in m["value_heads_per_layer"]), None)
    if "perplexity" in m:
        ppl = m["perplexity"]
        rows[perplexity_label(ppl)] = (ppl["perplexity"], "{:.3f}")
        rows["bits per byte"] = (ppl["bits_per_byte"], "{:.4f}")
    if "recall" in m:
        n = m["recall"]["sequences_per_point"]
        for r in m["recall"]["by_pairs"]:
            rows[f"recall accuracy, {r['pairs']} pairs ({n} sequences)"] = (r["accuracy"], "{:.3f}")
    for name, t in (m.get("tasks") or {}).items():
        if t.get("accuracy") is not None:
            se = t.get("accuracy_stderr")
            rows[task_label(name, t)] = (t["accuracy"], "{:.3f}", *([StandardError(se)] if se is not None else []))
    rows["parameters"] = (m["parameters"], "{:,}")
    rows["fp32 state bytes per sequence"] = (m["state_bytes_per_sequence"], "{:,}")
    if "kernel" in m:
        k = m["kernel"]
        rows[KERNEL_ROW] = (k["median_ms"], "{:.3f}", k["spread"]["iqr_ms"])
        rows["kernel time: IQR (ms) · min–max (ms)"] = (
            f"{k['spread']['iqr_ms']:.3f} · {k['spread']['min_ms']:.3f}–{k['spread']['max_ms']:.3f}", None)
        threads = f", {k['threads']} CPU thread{'s' if k['threads'] != 1 else ''}" if k.get("threads") else ""
        rows["kernel time: repeats"] = (f"{k['repeats']}{threads}" + (" — noisy (IQR > 20 % of median)"
                                                                      if k["noisy"] else ""), None)
    return rows


def _show(value, fmt, spread=None) -> str:
    if isinstance(spread, StandardError):
        return f"{fmt.format(value)} ± {fmt.format(spread)}"
    return fmt.format(value) if fmt else str(value)


def _delta(new: tuple, old: tuple) -> tuple[str, str]:
    (a, fmt, *spread_a), (b, _, *spread_b) = new, old
    if fmt is None or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (a, b)):
        return MISSING, MISSING
    diff = a - b
    sign = "+" if diff > 0 else "−" if diff < 0 else "±"
    pct = f"{sign}{abs(diff) / abs(b):.1%}" if b else MISSING
    if any(isinstance(x, StandardError) for x in spread_a + spread_b):  # two accuracies: 2 × their combined SE
        noise = 2 * math.sqrt(sum(x * x for x in spread_a + spread_b))
        if abs(diff) <= noise:
            return f"{sign}{fmt.format(abs(diff))} (within noise)", f"within noise (2 SE {fmt.format(noise)})"
        return sign + fmt.format(abs(diff)), (f"{sign}{abs(diff) / abs(b):.1%}" if b else MISSING)
    noise = max(spread_a + spread_b, default=None)
    if noise is not None and abs(diff) <= noise:  # inside the larger IQR of the two timings: not a change
        return f"{sign}{fmt.format(abs(diff))} (within noise)", f"within noise (IQR {fmt.format(noise)})"
    return sign + fmt.format(abs(diff)), pct


METHOD_ROW = "method"


def before_after_table(columns: dict[str, dict], methods: dict[str, str] | None = None) -> pd.DataFrame:
    """One column per measurement (before, after pruning, after recovery), one row per quantity; after each
    later column, its change from the first column: "Δ <name>" (absolute) and "% <name>" (relative).
    `methods` (column → what produced it) is the first row, so a reader sees which recovery made the column."""
    per_column = {name: _rows(m) for name, m in columns.items()}
    if methods:
        per_column = {name: {METHOD_ROW: (methods[name], None), **rows} if name in methods else rows
                      for name, rows in per_column.items()}
    order = list(dict.fromkeys(row for rows in per_column.values() for row in rows))
    names = list(per_column)
    first = per_column[names[0]]
    table = {}
    for n, name in enumerate(names):
        rows = per_column[name]
        table[name] = [_show(*rows[r]) if r in rows else MISSING for r in order]
        if n:
            changes = [_delta(rows[r], first[r]) if r in rows and r in first else (MISSING, MISSING)
                       for r in order]
            table[f"Δ {name}"] = [d for d, _ in changes]
            table[f"% {name}"] = [p for _, p in changes]
    frame = pd.DataFrame(table, index=order)
    frame.index.name = "quantity"
    return frame


NOISE_SE = 2.0  # a change within this many standard errors is "within noise"


def test_noise(change: dict | None, test_tokens: int) -> float | None:
    """The standard error (nats/token) of a paired Δ log perplexity on `test_tokens` tokens, from the recovery's
    paired validation windows (analysis.shrink.recovery: `validation_change`): their SE scaled by
    √(validation tokens / test tokens), the same per-window spread on a different number of tokens."""
    if not change or not change.get("se") or not math.isfinite(change["se"]) or not test_tokens:
        return None
    return change["se"] * math.sqrt(change["tokens"] / test_tokens)


def recovery_verdict(pruned: dict, recovered: dict, change: dict | None = None) -> dict:
    """Did recovery lower the pruned model's perplexity beyond noise? {"verdict": better|worse|within noise|unchanged|
    not comparable, "text"}. `change`: the recovery's paired validation change (its noise estimate); without it
    the verdict says that no noise estimate is available."""
    a, b = pruned["perplexity"], recovered["perplexity"]
    if perplexity_label(a) != perplexity_label(b):
        return {"verdict": "not comparable",
                "text": f"measured with other evaluation settings than the pruned model ({perplexity_label(b)} vs "
                        f"{perplexity_label(a)}), so the two perplexities cannot be compared; run recovery again"}
    before, after = a["perplexity"], b["perplexity"]
    delta = math.log(after / before)
    change_text = (f"perplexity {before:.2f} → {after:.2f} ({after / before - 1:+.2%}, Δ log perplexity "
                   f"{signed(delta)} nats/token, vs the pruned model)")
    se = test_noise(change, a.get("tokens"))
    if se is None:
        noise = "; no noise estimate (the recovery kept no per-window validation losses)"
    else:
        noise = (f"; noise: {NOISE_SE:g} SE = {NOISE_SE * se:.4f} nats/token, from the paired differences over the "
                 f"{change['windows']} validation windows of the recovery, scaled to the {a['tokens']:,} test tokens")
    if se is not None and abs(delta) < NOISE_SE * se:
        return {"verdict": "within noise", "text": f"within noise, {change_text}{noise}"}
    verdict = "better" if after < before else "worse" if after > before else "unchanged"
    text = {"better": f"better, {change_text}", "worse": f"**worse**: {change_text}",
            "unchanged": f"unchanged, {change_text}"}[verdict]
    return {"verdict": verdict, "text": text + noise}


def sweep_table(points: Sequence[dict], labels: dict[str, str]) -> pd.DataFrame:
    """The sweep's values under its chart: one row per point, Δ% against the unpruned perplexity."""
    rows = []
    for p in sorted(points, key=lambda p: (p["strategy"] != "unpruned", p["strategy"], p["ratio"])):
        row = {"strategy": labels.get(p["strategy"], p["strategy"]), "ratio ρ": p["ratio"],
               "dk per layer": ", ".join(str(d) for d in p["head_k_dims"]), "perplexity": p["perplexity"],
               "Δ% vs unpruned": p.get("delta_vs_unpruned", 0.0 if p["strategy"] == "unpruned" else None)}
        if any("recovered_perplexity" in q for q in points):
            row["after recovery"] = p.get("recovered_perplexity")
            row["Δ% after recovery"] = p.get("recovered_delta_vs_unpruned")
        for name in dict.fromkeys(n for q in points for n in q.get("tasks") or {}):
            t = (p.get("tasks") or {}).get(name) or {}
            row[f"{name} ({t.get('metric', 'acc')})"] = t.get("accuracy")
            row[f"{name} ± SE"] = t.get("accuracy_stderr")
        if any("kernel" in q for q in points):
            k = p.get("kernel") or {}
            row["kernel ms (median)"] = k.get("median_ms")
            row["kernel IQR (ms)"] = (k.get("spread") or {}).get("iqr_ms")
            row["repeats"] = k.get("repeats")
        rows.append(row)
    return pd.DataFrame(rows)


def latency_table(points: Sequence[dict]) -> pd.DataFrame:
    """The latency sweep's values under its chart: median, IQR, min–max, repeats, threads, noisy flag."""
    return pd.DataFrame([{"dk": p["key_dim"], "tiles": p["tiles"], "median (ms)": p["median_ms"],
                          "IQR (ms)": p["spread"]["iqr_ms"], "min (ms)": p["spread"]["min_ms"],
                          "max (ms)": p["spread"]["max_ms"], "repeats": p["repeats"],
                          "CPU threads": p["threads"] if p.get("threads") else "n/a (GPU)",
                          "noisy (IQR > 20 % of median)": "yes" if p["noisy"] else "no"}
                         for p in sorted(points, key=lambda p: p["key_dim"])])


def _flat(point: dict) -> dict:
    out = {}
    for k, v in point.items():
        if isinstance(v, dict):  # e.g. a timing's spread: spread.iqr_ms, ...
            out.update({f"{k}.{kk}": vv for kk, vv in _flat(v).items()})
        else:
            out[k] = ", ".join(str(x) for x in v) if isinstance(v, (list, tuple)) else v
    return out


def points_csv(points: Sequence[dict]) -> str:
    """Sweep or latency points as CSV (per-layer lists joined with ', ', nested fields as a.b)."""
    return pd.DataFrame([_flat(p) for p in points]).to_csv(index=False)


def points_json(points: Sequence[dict], settings: dict) -> str:
    return json.dumps({"settings": settings, "results": list(points)}, indent=2, default=str)
