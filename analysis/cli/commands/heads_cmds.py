"""heads: state-rank stratification of every layer's heads, its stability across inputs, and each head's cost."""
from __future__ import annotations

from analysis.cli.commands.checks import whole
from analysis.cli.commands.common import emit, load
from analysis.cli.commands.progress import fraction


def _setup_heads(p):
    from analysis.defaults import HEAD_TEXTS
    p.add_argument("--texts", help="comma-separated inputs the split is computed on: bundled splits (test, wiki, ...), "
                                   "random-ids (random token ids), recall (a recall model's own sequences) or text "
                                   f"file paths (default {','.join(HEAD_TEXTS)}; a recall model: "
                                   "recall,recall,random-ids)")
    p.add_argument("--tokens", type=whole(2, 1 << 16), default=256, help="tokens per sequence")
    p.add_argument("--sequences", type=whole(1, 1024), default=4, help="sequences (consecutive windows) per input")
    p.add_argument("--measure", type=whole(0, 4096), default=0,
                   help="also remove each head alone and measure Δ loss with its paired SE on this many "
                        "validation windows (0: no)")
    p.add_argument("--seed", type=whole(0), default=0)


def run_heads(args) -> None:
    from analysis.models import limits
    from analysis.runs.head_study import heads_study
    model, tokenizer, meta = load(args)
    texts = None if args.texts is None else [t.strip() for t in args.texts.split(",") if t.strip()]
    limits.check_forward(model, args.sequences, args.tokens, "Reading each input")
    with fraction(args, "heads: states of every head on each input") as progress:
        report = heads_study(model, tokenizer, texts, args.tokens, args.sequences, args.seed, args.measure,
                             progress=progress)
    report = {**meta, **report}
    lines = [f"state-rank stratification, {args.sequences}×{args.tokens} tokens of: " + "; ".join(report["texts"]),
             f"split: {report['split_rule']}"]
    for layer in report["layers"]:
        groups = " ".join(f"{h['head']}:{h['group']}{'' if h['same_on_all_texts'] else '*'}" for h in layer["heads"])
        kappa = "n/a" if layer["kappa"] is None else f"{layer['kappa']:.2f}"
        lines.append(f"layer {layer['layer']} (block {layer['block']}): {groups}  agreement "
                     f"{layer['agreement']:.0%}, κ {kappa}")
        if "removal" in layer["heads"][0]:
            lines.append("  removed alone, Δ nats/token ± SE: " + ", ".join(
                f"{h['head']}: {h['removal']['delta']:+.4f} ± {h['removal']['se'] or 0:.4f}" for h in layer["heads"]))
    lines += ["(* = not the same group on every input)", *report["notice"]]
    emit(args, report, "\n".join(lines))


COMMANDS = {
    "heads": ("state-rank stratification of the heads (low-/high-rank groups), its stability across inputs, and "
              "each head's removal cost", _setup_heads, run_heads),
}
