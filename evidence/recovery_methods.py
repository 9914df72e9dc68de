"""Which recovery wins after a prune: q/k rows (`qk`), LoRA (`lora`), or LoRA + distillation (`lora-kd`), at the
same steps and tokens, on the bundled samples; a markdown table of test perplexity after pruning and after each
recovery, with the paired standard error over test windows (same windows, both models; sensitivity's
paired_difference) of each recovery's change in log-perplexity.

    python evidence/recovery_methods.py                                  # 150 steps of 8 × 256 (long on a CPU)
    python evidence/recovery_methods.py --steps 3 --batch 2 --seq-len 32 --eval-tokens 512   # a smoke run
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ("gated-deltanet-small", "qwen35-hybrid-small")
POINTS = (("drrqr", 0.75), ("drrqr", 0.875), ("random", 0.5))
METHODS = ("qk", "lora", "lora-kd")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--points", default=",".join(f"{s}:{r:g}" for s, r in POINTS), help="strategy:ratio,...")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--eval-every", type=int, default=25, help="validation checks (the best state is kept)")
    p.add_argument("--eval-tokens", type=int, default=8192, help="test tokens scored after each step of the table")
    p.add_argument("--context", type=int, default=256, help="test context")
    p.add_argument("--calib-sequences", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)

    import torch

    import analysis
    analysis.ready()
    from analysis.data import corpus as data
    from analysis.shrink.calibration import calibrate
    from analysis.evaluate.perplexity import perplexity
    from analysis.models.load import load_model
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.recovery import RecoverySettings, recover
    from analysis.shrink.sensitivity import paired_difference
    from analysis.shrink.strategies import get_strategy
    if args.threads:
        torch.set_num_threads(args.threads)
    tok = data.load_tokenizer()
    methods = args.methods.split(",")
    points = [(s, float(r)) for s, r in (x.split(":") for x in args.points.split(","))]
    print(f"Recovery methods at the same budget: {args.steps} steps × {args.batch} × {args.seq_len} tokens "
          f"(train split), validation-best every {args.eval_every} steps; test perplexity over the first "
          f"{args.eval_tokens:,} test tokens, context {args.context}; ± = paired SE of Δ log-perplexity vs. the "
          "pruned model over test windows.\n")
    for name in args.models.split(","):
        model = load_model(str(ROOT / "sample_models" / name), device="cpu")
        ppl = lambda m: perplexity(m, tok, "test", args.context, max_tokens=args.eval_tokens,  # noqa: E731
                                   per_window=True, yes=True)
        base = ppl(model)
        calib = None
        print(f"**{name}** — unpruned {base['perplexity']:.2f} ({base['dataset']}, {base['tokens']:,} tokens, "
              f"context {base['context']}, {base['device']} {base['dtype']})\n")
        print("| strategy ρ (dk) | after pruning | " + " | ".join(f"after {m}" for m in methods) + " |")
        print("|---|---|" + "---|" * len(methods))
        for strategy, ratio in points:
            if get_strategy(strategy).needs_calibration and calib is None:
                calib = calibrate(model, tok, args.calib_sequences, 256, args.seed)
            dims = plan_key_dims(model, ratio=ratio)
            pruned = prune(model, strategy, dims, calib if get_strategy(strategy).needs_calibration else None,
                           seed=args.seed).model
            after = ppl(pruned)
            cells = [f"{after['perplexity']:.2f}"]
            for method in methods:
                start = time.time()
                out = recover(pruned, tok, RecoverySettings(method=method, steps=args.steps, batch=args.batch,
                                                            seq_len=args.seq_len, eval_every=args.eval_every,
                                                            seed=args.seed), teacher=model, yes=True)
                got = ppl(out.model)
                d = paired_difference(after["window_losses"], got["window_losses"])
                se = "" if math.isinf(d["se"]) else f" ± {d['se']:.4f}"
                cells.append(f"{got['perplexity']:.2f} (Δ log {d['delta_log_ppl']:+.4f}{se}; kept step "
                             f"{out.kept_step}; {time.time() - start:.0f} s)")
            print(f"| {strategy} {ratio:g} ({dims[0]}) | " + " | ".join(cells) + " |", flush=True)
        print()


if __name__ == "__main__":
    main()
