"""One short GPU session: fla's Triton path vs our CPU path, pruned models on fla kernels, latency vs dk,
and the 340M shape at scale (rank at 2048 tokens, prune 0.5, perplexity, kernel latency at its dims).

Run on a CUDA machine: `python benchmarks/gpu_check.py` (a few minutes). Prints one line per check.
`--scale-only` runs just the 340M part; `--device cpu --layers 1 --tokens 128` runs that part on the CPU
(what the test suite does, so the script cannot rot between GPU sessions).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import analysis  # noqa: E402

analysis.ready()  # the CPU path for fla's ops and the project's model types
from analysis.data import corpus as data
from analysis.models import load as models  # noqa: E402
from analysis.shrink.calibration import calibrate  # noqa: E402
from analysis.evaluate.perplexity import perplexity  # noqa: E402
from analysis.evaluate.latency import KERNELS, kernel_latency, summary, time_call  # noqa: E402
from analysis.shrink.prune import prune  # noqa: E402
from analysis.models.key_plan import plan_key_dims
from analysis.inspect.states import collect_states  # noqa: E402
from benchmarks.real_size import FAMILIES, build  # noqa: E402


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def peak_memory(device: torch.device) -> str:
    if device.type != "cuda":
        return "peak memory: see the process RSS"
    return f"peak CUDA memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"


def scale_check(device: str, dtype: torch.dtype, layers: int = 24, tokens: int = 2048, repeats: int = 3,
                families=FAMILIES) -> None:
    """The 340M shape (random init, seed 0; the bundled tokenizer's vocabulary so perplexity can be scored):
    forward vs rank (stride 64) side by side, a 0.5 prune on the model's own device, perplexity of both
    (random weights: the values only show the pipeline runs; ~vocab size is expected), kernel latency at
    the shape's dims. Timings: median over `repeats` with their spread (analysis.evaluate.latency.summary)."""
    dev = torch.device(device)
    tok = models.load_tokenizer("deltanet-small")
    ids = torch.randint(0, len(tok), (1, tokens), generator=torch.Generator().manual_seed(1)).to(dev)
    for family in families:
        model = build(family, "340M", layers, vocab=len(tok)).to(dev, dtype)
        params = sum(p.numel() for p in model.parameters())
        label = f"{family} 340M shape ({params / 1e6:.0f} M parameters, {layers} layers), {dtype}, 1×{tokens} tokens"
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        with torch.no_grad():
            fwd = time_call(lambda: model(ids, use_cache=False).logits, dev, repeats=repeats)
            rank = time_call(lambda: collect_states(model, ids, stride=64), dev, repeats=repeats)
            trace = collect_states(model, ids, stride=64)
        u = trace.metric("rank_utilization")
        print(f"{label}: forward {summary(fwd)}; rank stride 64 {summary(rank)} "
              f"→ {rank['median_ms'] / fwd['median_ms']:.2f}× forward; {peak_memory(dev)}; "
              f"final-state rank utilization {float(u[..., -1].mean()):.3f} (finite: {bool(torch.isfinite(u).all())})")
        pruned = prune(model, "l1", plan_key_dims(model, ratio=0.5)).model
        context = min(tokens, 512)
        before = perplexity(model, tok, "test", context=context, max_tokens=4 * context, batch=4)
        after = perplexity(pruned, tok, "test", context=context, max_tokens=4 * context, batch=4)
        with torch.no_grad():
            pruned_fwd = time_call(lambda: pruned(ids, use_cache=False).logits, dev, repeats=repeats)
        print(f"  prune l1 0.5 (dk 128 → {plan_key_dims(model, ratio=0.5)[0]}) on {device}: test perplexity "
              f"{before['perplexity']:.1f} → {after['perplexity']:.1f} (random weights; context {context}, "
              f"{after['tokens']} tokens); forward {fwd['median_ms']:.1f} → {pruned_fwd['median_ms']:.1f} ms")
        del model, pruned, trace
    for kernel in ("delta_rule", "gated_delta_rule"):
        for p in kernel_latency([32, 64, 96, 128], batch=1, tokens=tokens, heads=8, value_dim=128, device=device,
                                kernel=kernel, repeats=repeats):
            print(f"  latency at the 340M shape: {p['op']} dk {p['key_dim']:3d}: {summary(p)} "
                  f"({p['dtype']}, B1 T{tokens} H8 dv128)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale-only", action="store_true", help="only the 340M-shape part")
    parser.add_argument("--layers", type=int, default=24, help="layers of the 340M shape (fewer: a quick check)")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.device == "cpu":
        scale_check("cpu", torch.float32, args.layers, args.tokens, args.repeats)
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this check needs a GPU (or give --device cpu for the 340M part on the CPU)")
    print("device:", torch.cuda.get_device_name(0))
    scale_check("cuda", torch.bfloat16, args.layers, args.tokens, args.repeats)
    if args.scale_only:
        return
    for name in ("deltanet-small", "gated-deltanet-small"):
        cpu = models.load_model(name, device="cpu")
        tok = models.load_tokenizer(cpu)
        ids = data.token_windows(data.encode(data.load_text("test"), tok), 256, max_windows=4)
        for dtype in (torch.bfloat16, torch.float32):
            if dtype == torch.float32 and name == "deltanet-small":
                continue  # fla's DeltaNet chunk kernel refuses fp32
            gpu = models.load_model(name, device="cuda", dtype=dtype)
            with torch.no_grad():
                a = gpu(ids.cuda(), use_cache=True)
                b = cpu(ids, use_cache=True)
            state = rel(a.past_key_values[0]["recurrent_state"].cpu(), b.past_key_values[0]["recurrent_state"])
            print(f"{name} {dtype}: logits rel diff {rel(a.logits.cpu(), b.logits):.2e}, layer-0 state {state:.2e}")
        calib = calibrate(cpu, tok, n_sequences=8)
        for strategy in ("drrqr", "wanda"):
            for ratios in ([0.5] * 4, [0.25, 0.5, 0.75, 0.5]):
                pruned = prune(cpu, strategy, plan_key_dims(cpu, ratios=ratios), calib).model
                on_gpu = pruned.to("cuda", torch.bfloat16)
                with torch.no_grad():
                    out = on_gpu(ids.cuda()).logits.float().cpu()
                    ref = pruned.to("cpu", torch.float32)(ids).logits
                print(f"  pruned {strategy} {ratios}: fla kernels finite={bool(torch.isfinite(out).all())}, "
                      f"rel diff vs CPU {rel(out, ref):.2e}")
    for kernel in KERNELS:
        for p in kernel_latency([16, 32, 64, 96, 128, 192, 256], batch=8, tokens=4096, heads=16, value_dim=128,
                                device="cuda", kernel=kernel):
            print(f"latency {p['op']} dk {p['key_dim']:3d} tiles {p['tiles']}: {p['ms']:.3f} ms "
                  f"({p['dtype']}, B{p['batch']} T{p['tokens']} H{p['heads']} dv{p['value_dim']}, {p['timer']})")


if __name__ == "__main__":
    main()
