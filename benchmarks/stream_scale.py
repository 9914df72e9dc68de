"""A checkpoint larger than the memory budget, run one block at a time: peak memory, wall time, and what streaming
costs.

1. Builds (once, unless --out-dir already holds it) a random-init Nemotron-H-shaped hybrid in bfloat16 — Mamba-2,
   MLP and attention layers in Nemotron-H-8B's pattern and sizes (hidden 4096, 128 Mamba heads of 64, state 128 in
   8 groups, MLP 21504, 32/8 attention heads), `--layers` of them, a 65,536-token vocabulary — written unit by unit
   into shards of at most `--shard-gb` (analysis.io.shards), never held whole: 13 GB on disk at the default 44 layers.
2. Runs `rank`, `ppl` and `prune --out` on it with `--max-memory` (default 3GiB), each in a fresh process that notes
   its resident memory after the imports (the budget's baseline) and reports its peak (VmHWM) at the end.
3. Times, in one fresh process each, the streamed state collection (`collect_states`, stride 64, as `rank` runs it)
   and the streamed forward alone on the same 256 tokens: their ratio is what the states cost on top of streaming.
4. On the bundled deltanet-small, side by side in one process with a warm page cache: the in-memory forward vs the
   streamed forward (budget below the model) on the same tokens, medians over --repeats.

Targets: peak above the baseline ≤ the budget; rank ≤ 1.2 × the streamed forward; the streamed forward of the sample
≤ 1.5 × its in-memory forward. Last line: `streamed_forward_vs_in_memory: X`.

Usage: `nice python benchmarks/stream_scale.py --out-dir /big/disk/stream-scale [--layers 44] [--keep]`
(the folder is removed afterwards unless --keep; `--layers 8 --hidden 256 --tokens 32 --budget 16MiB --shard-gb 0.004`
is a quick check of the script).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"   # Nemotron-H-8B's 52 layers

CHILD = """
import json, sys, time
from analysis.archs.install import ready
ready()
from analysis.models import budget
base = budget.note_baseline()
started = time.perf_counter()
what, args = sys.argv[2], sys.argv[3:]
extra = {}
if what == "cli":
    from analysis.cli.main import main
    code = main(args)
else:  # "rank" or "forward": the streamed pass alone, on the rank command's tokens
    import torch
    from analysis.models.model_inputs import model_batch
    from analysis.models import load as models
    from analysis.models.forward import run_batches
    from analysis.inspect.states import collect_states
    with budget.budget_scope(budget.parse_size(args[1])):
        model = models.load_model(args[0], device="cpu")
        ids = model_batch(model, models.load_tokenizer(model), int(args[2]), 1, split="test").ids
        began = time.perf_counter()
        if what == "rank":
            collect_states(model, ids, stride=64)
        else:
            run_batches(model, [ids])
        extra["pass_s"] = time.perf_counter() - began
    code = 0
json.dump({"code": code, "baseline": base, "peak": budget.peak_resident_bytes(),
           "wall_s": time.perf_counter() - started, **extra}, open(sys.argv[1], "w"))
"""


def config(layers: int, hidden: int):
    from transformers.models.nemotron_h import NemotronHConfig
    small = hidden < 4096  # the quick check: every size scaled with the hidden size
    scale = hidden / 4096
    return NemotronHConfig(
        vocab_size=65536 if not small else 8192, hidden_size=hidden, hybrid_override_pattern=PATTERN[:layers],
        intermediate_size=int(21504 * scale), num_attention_heads=32 if not small else 4,
        num_key_value_heads=8 if not small else 2, head_dim=128 if not small else 64,
        mamba_num_heads=int(128 * scale), mamba_head_dim=64, ssm_state_size=128 if not small else 32,
        n_groups=8 if not small else 2, chunk_size=128, tie_word_embeddings=False, dtype="bfloat16")


def build(folder: Path, layers: int, hidden: int, shard_gb: float) -> int:
    """Write the random-init checkpoint one unit at a time; its size on disk in bytes."""
    import torch

    import analysis
    analysis.ready()
    from analysis.archs import adapter_for
    from analysis.io.shards import ShardWriter
    from analysis.models.stream.save import plan
    from analysis.models.stream.skeleton import Skeleton, build as meta_build
    cfg = config(layers, hidden)
    model = meta_build(cfg, torch.bfloat16)
    skeleton = Skeleton(model, None, adapter_for(model).decoder_layers(model), torch.bfloat16)
    units = plan(skeleton)
    folder.mkdir(parents=True)
    cfg.architectures = [type(model).__name__]
    cfg.save_pretrained(folder)
    writer = ShardWriter(folder, [t for *_, planned in units for t in planned], int(shard_gb * 1e9))
    gen = torch.Generator().manual_seed(0)
    for _unit, _names, planned in units:
        for t in planned:
            if t.name.endswith(("norm.weight", ".D")):
                value = torch.ones(t.shape)
            elif t.name.endswith("A_log"):
                value = torch.empty(t.shape).uniform_(0.0, 2.7, generator=gen)   # decays e^{-e^{A_log}·dt}
            elif t.name.endswith("dt_bias"):
                value = torch.empty(t.shape).uniform_(-4.0, -2.0, generator=gen)
            elif t.name.endswith("bias"):
                value = torch.zeros(t.shape)
            else:
                value = torch.empty(t.shape).normal_(0.0, 0.02, generator=gen)
            writer.write(t.name, value.to(getattr(torch, t.dtype)))
    writer.finish()
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def child(what: str, args: list[str], log: Path) -> dict:
    out = log.with_suffix(".json")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as fh:
        done = subprocess.run([sys.executable, "-c", CHILD, str(out), what, *args], cwd=ROOT, env=env, stdout=fh,
                              stderr=subprocess.STDOUT)
    record = json.loads(out.read_text()) if out.exists() else {"code": done.returncode}
    if done.returncode != 0 or record["code"] != 0:
        raise SystemExit(f"{what} {' '.join(args)} failed; see {log}")
    record["above_mib"] = (record["peak"] - record["baseline"]) / 2**20
    return record


def sample_ratio(repeats: int, tokens: int) -> tuple[float, float, float]:
    """(in-memory median s, streamed median s, ratio) of deltanet-small's forward with its logits on 1 × `tokens`
    test tokens, alternated repeat by repeat."""
    import torch

    from analysis.models.model_inputs import model_batch
    from analysis.models import budget, load as models
    from analysis.models.forward import run_batches
    whole = models.load_model("deltanet-small", device="cpu")
    ids = model_batch(whole, models.load_tokenizer(whole), tokens, 1, split="test").ids
    with budget.budget_scope(20 << 20):   # 20 MiB for 22 MB of weights: streamed
        streamed = models.load_model("deltanet-small", device="cpu")
        logits = lambda *_: None  # noqa: E731  (both compute their logits, as perplexity does)
        run_batches(streamed, [ids], on_logits=logits)  # a warm page cache (and first-call costs) before timing
        times = {"whole": [], "streamed": []}
        for _ in range(repeats):
            for name, model in (("whole", whole), ("streamed", streamed)):
                began = time.perf_counter()
                with torch.no_grad():
                    run_batches(model, [ids], on_logits=logits)
                times[name].append(time.perf_counter() - began)
    a, b = statistics.median(times["whole"]), statistics.median(times["streamed"])
    return a, b, b / a


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", type=Path, default=Path("/tmp/stream-scale"))
    p.add_argument("--layers", type=int, default=44)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--shard-gb", type=float, default=4.0)
    p.add_argument("--budget", default="3GiB")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--tokens", type=int, default=256, help="tokens of rank, of the timed passes and per ppl window")
    p.add_argument("--sample-tokens", type=int, default=256, help="tokens of the bundled sample's timed forwards")
    p.add_argument("--keep", action="store_true", help="keep the checkpoint (and the pruned copy) afterwards")
    p.add_argument("--steps", default="cli,passes,sample", help="which parts to run (comma-separated): cli (rank, "
                   "ppl, prune --out), passes (streamed rank vs forward), sample (deltanet-small streamed vs whole)")
    args = p.parse_args()
    steps = set(args.steps.split(","))
    model_dir, pruned_dir, logs = args.out_dir / "model", args.out_dir / "pruned", args.out_dir / "logs"
    try:
        if steps & {"cli", "passes"} and not (model_dir / "config.json").exists():
            began = time.perf_counter()
            size = build(model_dir, args.layers, args.hidden, args.shard_gb)
            print(f"built {model_dir}: {size / 1e9:.1f} GB in {len(list(model_dir.glob('*.safetensors')))} shards, "
                  f"{time.perf_counter() - began:.0f} s", flush=True)
        size = sum(p.stat().st_size for p in model_dir.glob("*.safetensors")) if model_dir.exists() else 0
        logs.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(pruned_dir, ignore_errors=True)
        budget_args = ["--max-memory", args.budget, "--quiet"]
        tokens = str(args.tokens)
        runs = {
            "rank": ["rank", str(model_dir), "--tokens", tokens, "--batch", "1", "--stride", "64", *budget_args],
            "ppl": ["ppl", str(model_dir), "--context", tokens, "--max-tokens", str(2 * args.tokens), *budget_args],
            "prune --out": ["prune", str(model_dir), "--strategy", "l1", "--ratio", "0.5", "--eval-tokens", tokens,
                            "--eval-context", tokens, "--out", str(pruned_dir), *budget_args],
        }
        rows = []
        for name, cli in runs.items() if "cli" in steps else ():
            record = child("cli", cli, logs / f"{name.split()[0]}.log")
            rows.append((name, record))
            print(f"{name}: {record['wall_s']:.0f} s, peak {record['above_mib']:.0f} MiB above the baseline", flush=True)
        passes = {k: child(k, [str(model_dir), args.budget, tokens], logs / f"pass-{k}.log")
                  for k in (("forward", "rank") if "passes" in steps else ())}
        for k, record in passes.items():
            print(f"streamed {k} pass: {record['pass_s']:.1f} s, peak {record['above_mib']:.0f} MiB above the baseline",
                  flush=True)
        whole_s, streamed_s, sample = sample_ratio(args.repeats, args.sample_tokens) if "sample" in steps else (0.0, 0.0, 0.0)
        limit = args.budget
        print(f"\nNemotron-H-shaped hybrid, {args.layers} layers, {size / 1e9:.1f} GB bfloat16 on disk, --max-memory "
              f"{limit}, CPU float32 compute, {os.cpu_count()} cores\n")
        print("| command | wall time | peak above the baseline | within the budget |")
        print("|---|---|---|---|")
        from analysis.models.budget import parse_size
        for name, record in rows:
            fits = record["peak"] - record["baseline"] <= parse_size(limit)
            print(f"| `{name}` | {record['wall_s']:.0f} s | {record['above_mib']:.0f} MiB | {'yes' if fits else 'NO'} |")
        if passes:
            ratio = passes["rank"]["pass_s"] / passes["forward"]["pass_s"]
            print(f"\nstreamed rank (collect_states, stride 64) {passes['rank']['pass_s']:.1f} s vs streamed forward "
                  f"{passes['forward']['pass_s']:.1f} s on the same {args.tokens} tokens: {ratio:.2f}× (target ≤ 1.2)")
        if "sample" in steps:
            print(f"deltanet-small, 1 × {args.sample_tokens} tokens, warm page cache, median of {args.repeats}: in memory "
                  f"{whole_s * 1000:.0f} ms, streamed {streamed_s * 1000:.0f} ms: {sample:.2f}× (target ≤ 1.5)")
            print(f"streamed_forward_vs_in_memory: {sample:.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(args.out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
