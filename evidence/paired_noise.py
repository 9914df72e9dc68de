"""Paired measurement noise of a test-perplexity difference between two plans (same strategy, same tokens).

Both pruned models score the same windows of the test split (first TEST_TOKENS tokens, context 256, the
evidence script's measurement); the per-window difference of mean log-loss gives the paired difference and
its standard error over windows (windows as independent blocks). Reads rows where the allocated plan and
uniform differ from sample_models/results/sensitivity-evidence.json and stores a `paired` entry on them.

    nice .venv/bin/python evidence/paired_noise.py deltanet-small gated-deltanet-small
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.models import load as models  # noqa: E402
from analysis.shrink.allocate import paired_difference  # noqa: E402
from analysis.evaluate.perplexity import perplexity  # noqa: E402
from analysis.shrink.prune import prune  # noqa: E402
from analysis.inspect.report import write_json  # noqa: E402
from analysis.shrink.sensitivity import MapSettings, calibration_for  # noqa: E402
from analysis.shrink.strategies import get_strategy  # noqa: E402
from sensitivity_evidence import OUT, TEST_TOKENS  # noqa: E402


def window_losses(model, tok) -> list[float]:
    """Mean log-loss per window of the evidence's test measurement (analysis.evaluate.perplexity.perplexity's windows)."""
    return perplexity(model, tok, "test", 256, max_tokens=TEST_TOKENS, per_window=True)["window_losses"]


def main(names: list[str]) -> None:
    evidence = json.loads(OUT.read_text())
    for name in names:
        m = evidence["models"][name]
        model = models.load_model(name, device="cpu")
        tok = models.load_tokenizer(model)
        calib = calibration_for(model, tok, MapSettings(**{**m["map_settings"], "ratios": (0.5,)}), None)
        cache = {}

        def losses(strategy, dims):
            key = (strategy, tuple(dims))
            if key not in cache:
                c = calib if get_strategy(strategy).needs_calibration else None
                cache[key] = window_losses(prune(model, strategy, dims, c).model, tok)
            return cache[key]
        for target in sorted({r["target"] for r in m["rows"]}):
            rows = {r["plan"]: r for r in m["rows"] if r["target"] == target}
            uni = {a["strategy"]: a for a in rows["uniform"]["all"]}
            pairs = [(uni[a["strategy"]], a) for a in rows["sensitivity-allocated"]["all"]]
            pairs.append((rows["uniform"]["best"], rows["sensitivity-allocated"]["best"]))
            for u, a in pairs:
                if (u["strategy"], u["dims"]) == (a["strategy"], a["dims"]):
                    continue
                a.setdefault("paired_vs_uniform", {})[f"{u['strategy']}"] = p = paired_difference(
                    losses(u["strategy"], u["dims"]), losses(a["strategy"], a["dims"]))
                print(name, target, u["strategy"], a["strategy"], p, flush=True)
    write_json(evidence, str(OUT))


if __name__ == "__main__":
    main(sys.argv[1:] or ["deltanet-small", "gated-deltanet-small"])
