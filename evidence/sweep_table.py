"""Markdown table of test perplexity per strategy and ratio from `python -m analysis sweep --json` files."""
import json
import sys
from pathlib import Path


def table(path: Path) -> str:
    payload = json.loads(path.read_text())
    results = payload["results"]
    base = results[0]
    ratios = sorted({r["ratio"] for r in results[1:]})
    lines = [f"**{payload['model']}** — unpruned perplexity {base['perplexity']:.2f} "
             f"({base['dataset']}, first {base['tokens']:,} tokens, context {base['context']}, {base['device']} "
             f"{base['dtype']})", "",
             "| strategy | " + " | ".join(f"ρ = {r:g} (dk {next(x['head_k_dims'][0] for x in results[1:] if x['ratio'] == r)})"
                                         for r in ratios) + " |",
             "|---|" + "---|" * len(ratios)]
    for strategy in dict.fromkeys(r["strategy"] for r in results[1:]):
        cells = []
        for ratio in ratios:
            point = next(x for x in results if x["strategy"] == strategy and x["ratio"] == ratio)
            cells.append(f"{point['perplexity']:.2f} ({point['delta_vs_unpruned']:+.1%})")
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(Path(p)) for p in sys.argv[1:]))
