"""The Query noise page's two tables as display frames (pure pandas): numbers as text, gaps as labels.

A missing value is never shown as "None" or NaN: beyond a sequence's numerical rank it reads "beyond rank",
a prediction outside its validity range reads "outside validity".
"""
from __future__ import annotations

import pandas as pd


def shown(df: pd.DataFrame, blank: str) -> pd.DataFrame:
    """Numbers as 4-significant-digit text and missing values as `blank`."""
    return df.apply(lambda col: col.map(lambda v: blank if v is None or v != v else
                                        f"{v:.4g}" if isinstance(v, float) else str(v)))


DIRECTION_COLUMN = "Σs²/s{}²"  # analysis.inspect.noise_report.state_table's per-direction column, j as a subscript
SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def closed_form_table(rows: list[dict], directions=None) -> pd.DataFrame:
    """One row per sequence (analysis.inspect.noise_report.state_table) plus quartile rows over the sequences; a
    direction's quartiles are over the sequences whose numerical rank reaches it. `directions` (1-based, the
    page's picker): only those directions' columns, so the table follows the picker; None keeps them all."""
    table = pd.DataFrame(rows).set_index("sequence")
    if directions is not None:
        wanted = {DIRECTION_COLUMN.format(str(j).translate(SUBSCRIPTS)) for j in directions}
        table = table[[c for c in table.columns if not c.startswith("Σs²/s") or c in wanted]]
    # a Frobenius norm's subscript, not a literal underscore, in the column title
    table = table.rename(columns={"‖S‖_F²": "‖S‖² (Frobenius)"})
    table.index = [f"sequence {i}" for i in table.index]
    quartiles = table.quantile([0.25, 0.5, 0.75])  # skips the blanks beyond a sequence's rank
    quartiles.index = ["25th percentile", "median", "75th percentile"]
    return shown(pd.concat([table, quartiles]), "beyond rank")


def _pct(x) -> str | None:
    return None if x is None else f"{x:+.1%}"


def _validity(ok: bool, start) -> str:
    return "yes" if ok else ("no: valid nowhere in range" if start is None else f"no: valid ≥ {start:.1f} dB")


def prediction_table(summaries: list[dict], snr_db, comparison_only: bool = False) -> pd.DataFrame:
    """One row per probe and SNR: the predictions (medians over sequences), where each re-normalised order is
    valid, and, once the Monte Carlo ran, its RMS with the IQR and each prediction's error against it.
    comparison_only: the model does not l2-normalise its query, so every re-normalised column says so."""
    rows = []
    for s in summaries:
        for i, x in enumerate(snr_db):
            row = {"probe": s["name"], "SNR (dB)": f"{x:g}", "raw query: exact": s["predicted_raw"]["median"][i]}
            if "mc_raw_rms" in s:
                row["raw: Monte Carlo"] = s["mc_raw_rms"]["median"][i]
            for order in ("second", "first"):
                ok = s[f"{order}_order_valid"][i]
                row[f"re-norm. {order} order"] = s[f"{order}_order"]["median"][i] if ok else None
                row[f"{order} order valid"] = _validity(ok, s[f"{order}_order_valid_from_snr_db"])
                if "mc_rms" in s:  # a prediction outside its validity has no error to report either
                    row[f"{order} order vs MC"] = _pct(s[f"{order}_order_error_vs_mc"][i]) if ok else None
            if "mc_rms" in s:
                row["re-norm.: Monte Carlo"] = s["mc_rms"]["median"][i]
                row["MC IQR"] = f"{s['mc_rms']['q25'][i]:.3g}–{s['mc_rms']['q75'][i]:.3g}"
            rows.append(row)
    table = pd.DataFrame(rows)
    if comparison_only:
        table = table.rename(columns={c: f"{c} (comparison only)" for c in table.columns if _renormalised(c)})
    return shown(table, "outside validity")


def _renormalised(column: str) -> bool:
    return column.startswith(("re-norm.", "first order", "second order")) or column == "MC IQR"
