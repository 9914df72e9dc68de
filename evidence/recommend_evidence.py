"""The recommendation (`plan MODEL --recommend --budget B`, analysis.shrink.allocate.recommend) against uniform on
held-out text, with paired standard errors: is it ever worse than uniform by more than 2 SE, and how often better?

For each sample with an l1 map (default map settings) and each budget 0.25 / 0.5 / 0.75 (mean ratio = the uniform
plan's state bytes): the recommended plan and uniform, each pruned with l1 and measured on held-out tokens
(analysis.data.roles: the test split, 16,384 tokens, context 256) through the one point cache that
evidence/plan_calibration.py and Verify share; the paired difference recommended − uniform over the 64
held-out windows.

    nice .venv/bin/python evidence/recommend_evidence.py [--models a,b,...]

Writes sample_models/results/recommend-MODEL.json per sample and prints the table (docs/held-out.md).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import analysis  # noqa: E402

analysis.ready()
from analysis.data.roles import held_out_stretch  # noqa: E402
from analysis.evaluate.perplexity import paired_difference  # noqa: E402
from analysis.io.json_out import write_json  # noqa: E402
from analysis.models import load as models  # noqa: E402
from analysis.shrink.allocate import SIGNIFICANCE, recommend  # noqa: E402
from analysis.shrink.sensitivity import DEFAULT_RATIOS, MapSettings, load_shipped  # noqa: E402
from analysis.shrink.stretch_measure import StretchMeasure  # noqa: E402

MODELS = ("gated-deltanet-small", "deltanet-small", "granite-h-small", "qwen35-hybrid-small", "gated-deltanet-deep")
BUDGETS = (0.25, 0.5, 0.75)
RESULTS = Path(__file__).resolve().parent.parent / "sample_models" / "results"


def evidence(name: str) -> dict | None:
    model = models.load_model(name, device="cpu")
    tok = models.load_tokenizer(model)
    smap = load_shipped(model, name, MapSettings("l1", DEFAULT_RATIOS))
    if smap is None:
        print(f"{name}: no shipped l1 map; skipped", flush=True)
        return None
    s, stretch = smap["settings"], held_out_stretch()
    m = StretchMeasure(model, tok, stretch, "l1", {"calib_sequences": s["calib_sequences"],
                                                   "calib_tokens": s["calib_tokens"]}, seed=s["seed"])
    rows = []
    for budget in BUDGETS:
        t0 = time.perf_counter()
        rec = recommend(smap, budget)
        uni = m.loss_vs_unpruned(rec["uniform"]["head_k_dims"])
        mine = uni if rec["plan"] == "uniform" else m.loss_vs_unpruned(rec["head_k_dims"])
        d = paired_difference(uni["per_window"], mine["per_window"])
        verdict = ("same plan" if rec["plan"] == "uniform" else "worse beyond 2 SE"
                   if d["delta_log_ppl"] > SIGNIFICANCE * d["se"] else "better beyond 2 SE"
                   if d["delta_log_ppl"] < -SIGNIFICANCE * d["se"] else "within noise")
        rows.append({"budget": budget, "plan": rec["plan"], "ratios": rec["ratios"], "head_k_dims": rec["head_k_dims"],
                     "predicted_delta_nats": rec["predicted_delta_nats"],
                     "predicted_uncertainty_nats": rec["predicted_uncertainty_nats"],
                     "held_out_delta": mine["delta"], "held_out_se": mine["se"],
                     "uniform_head_k_dims": rec["uniform"]["head_k_dims"], "uniform_held_out_delta": uni["delta"],
                     "uniform_held_out_se": uni["se"], "versus_uniform": d, "verdict": verdict,
                     "reason": rec["reason"]})
        print(f"{name} budget {budget}: {rec['plan']} dk' {rec['head_k_dims']} held-out {mine['delta']:+.4f} ± "
              f"{mine['se']:.4f} vs uniform {uni['delta']:+.4f} ± {uni['se']:.4f}; paired "
              f"{d['delta_log_ppl']:+.4f} ± {d['se']:.4f}: {verdict} ({time.perf_counter() - t0:.0f} s)", flush=True)
    out = {"kind": "recommend-evidence", "model": name, "strategy": "l1", "map": smap["measure"],
           "held_out": stretch.label(), "device": "cpu", "dtype": smap["dtype"], "rows": rows}
    write_json(out, str(RESULTS / f"recommend-{name}.json"))
    return out


def table(results: list[dict]) -> str:
    lines = ["| sample | budget ρ̄ | recommended (dk′) | held-out Δ | uniform held-out Δ | recommended − uniform (paired) "
             "| verdict |", "|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r["rows"]:
            d = row["versus_uniform"]
            lines.append(f"| {r['model']} | {row['budget']:g} | {row['plan']} ({' '.join(map(str, row['head_k_dims']))}) "
                         f"| {row['held_out_delta']:+.4f} ± {row['held_out_se']:.4f} | "
                         f"{row['uniform_held_out_delta']:+.4f} ± {row['uniform_held_out_se']:.4f} | "
                         f"{d['delta_log_ppl']:+.4f} ± {d['se']:.4f} | {row['verdict']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    results = [r for r in (evidence(n) for n in args.models.split(",")) if r]
    print(table(results))


if __name__ == "__main__":
    main()
