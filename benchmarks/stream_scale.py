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

5. (`--steps rows`, issue 41) Budgets below the largest block: a random-init fla Gated DeltaNet (hidden 2,048, a
   32,000-token vocabulary, untied, float32: a 250 MiB embedding and a 250 MiB output head, `--rows-layers` layers of
   108 MiB; 1.55 GB at the default 9) runs `rank` and `ppl` with `--max-memory 200MiB` — below the embedding and the
   head, which are read by the rows of the ids and in row slices — and the same commands in memory, each in a fresh
   process: peak above the baseline vs the budget (+ the 32 MiB allowance tests/models/test_stream_memory.py
   states), and the numbers streamed vs in memory. Last line: `rows_within_budget: yes|NO`.

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
    return write_random(folder, config(layers, hidden), torch.bfloat16, int(shard_gb * 1e9))


def write_random(folder: Path, cfg, dtype, shard_bytes: int | None) -> int:
    """Write a random-init model of `cfg` unit by unit (never whole in memory); its size on disk in bytes."""
    import torch

    import analysis
    analysis.ready()
    from analysis.archs import adapter_for
    from analysis.io.shards import ShardWriter
    from analysis.models.stream.save import plan
    from analysis.models.stream.skeleton import Skeleton, build as meta_build
    model = meta_build(cfg, dtype)
    skeleton = Skeleton(model, None, adapter_for(model).decoder_layers(model), dtype)
    units = plan(skeleton)
    folder.mkdir(parents=True)
    cfg.architectures = [type(model).__name__]
    cfg.save_pretrained(folder)
    writer = ShardWriter(folder, [t for *_, planned in units for t in planned], shard_bytes)
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


def rows_config(layers: int):
    """fla Gated DeltaNet at hidden 2,048 with a 32,000-token vocabulary, untied: the embedding and the head are each
    250 MiB in float32, a layer 108 MiB (6 heads of 256, expand_v 1, MLP 2,048)."""
    from fla.models import GatedDeltaNetConfig
    return GatedDeltaNetConfig(hidden_size=2048, vocab_size=32000, num_hidden_layers=layers, num_heads=6,
                               head_dim=256, expand_v=1.0, intermediate_size=2048, tie_word_embeddings=False,
                               fuse_cross_entropy=False)


def build_rows(folder: Path, layers: int) -> int:
    """Write the random-init Gated DeltaNet unit by unit (float32, one file); its size on disk in bytes."""
    import torch
    return write_random(folder, rows_config(layers), torch.float32, None)


def rows_check(out_dir: Path, layers: int, budget_text: str, tokens: int) -> bool:
    """Step 5: rank and ppl at a budget below the embedding and the head, vs the same in memory."""
    from analysis.models.budget import parse_size
    model_dir, logs = out_dir / "rows-model", out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if not (model_dir / "config.json").exists():
        began = time.perf_counter()
        size = build_rows(model_dir, layers)
        print(f"built {model_dir}: {size / 1e9:.2f} GB float32, {time.perf_counter() - began:.0f} s", flush=True)
    size = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    commands = {"rank": ["rank", str(model_dir), "--tokens", str(tokens), "--batch", "1", "--stride", "64"],
                "ppl": ["ppl", str(model_dir), "--context", str(tokens), "--max-tokens", str(4 * tokens)]}
    allowance = 32 << 20
    fits, results = True, {}
    print(f"\nGated DeltaNet, {layers} layers, vocabulary 32,000 × hidden 2,048 (embedding and head 250 MiB each), "
          f"{size / 1e9:.2f} GB float32 on disk; --max-memory {budget_text}\n")
    print("| command | where | wall time | peak above the baseline | within budget + 32 MiB |")
    print("|---|---|---|---|---|")
    for name, cli in commands.items():
        for where, extra in (("in memory", []), ("streamed", ["--max-memory", budget_text])):
            tag = f"rows-{name}-{where.split()[-1]}"
            record = child("cli", [*cli, *extra, "--quiet", "--json", str(logs / f"{tag}.out.json")], logs / f"{tag}.log")
            results[(name, where)] = json.loads((logs / f"{tag}.out.json").read_text())
            above = record["peak"] - record["baseline"]
            ok = above <= parse_size(budget_text) + allowance if extra else None
            fits &= ok is not False
            print(f"| `{name}` | {where} | {record['wall_s']:.0f} s | {above / 2**20:.0f} MiB | "
                  f"{'-' if ok is None else ('yes' if ok else 'NO')} |", flush=True)
    ppl = [results[("ppl", w)]["perplexity"] for w in ("in memory", "streamed")]
    print(f"\nppl: in memory {ppl[0]:.6f}, streamed {ppl[1]:.6f} (relative difference {abs(ppl[1] / ppl[0] - 1):.1e})")
    worst = 0.0
    for a, b in zip(results[("rank", "in memory")]["layers"], results[("rank", "streamed")]["layers"]):
        worst = max(worst, _worst_rel(a, b))
    print(f"rank: largest relative difference over every layer's numbers, streamed vs in memory: {worst:.1e}")
    print(f"rows_within_budget: {'yes' if fits else 'NO'}")
    return fits


def _worst_rel(a, b) -> float:
    """The largest relative difference between two JSON-like results of the same structure (numbers only)."""
    if isinstance(a, dict):
        return max((_worst_rel(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list):
        return max((_worst_rel(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) / max(abs(a), abs(b), 1e-12)
    return 0.0


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
                   "ppl, prune --out), passes (streamed rank vs forward), sample (deltanet-small streamed vs whole), "
                   "rows (a budget below the embedding and the head: rank and ppl vs in memory)")
    p.add_argument("--rows-layers", type=int, default=9, help="layers of the rows step's Gated DeltaNet")
    p.add_argument("--rows-budget", default="200MiB", help="--max-memory of the rows step")
    p.add_argument("--rows-tokens", type=int, default=128, help="rank tokens and ppl context of the rows step")
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
        if steps & {"cli", "passes", "sample"}:
            print(f"\nNemotron-H-shaped hybrid, {args.layers} layers, {size / 1e9:.1f} GB bfloat16 on disk, "
                  f"--max-memory {limit}, CPU float32 compute, {os.cpu_count()} cores\n")
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
        if "rows" in steps:
            rows_check(args.out_dir, args.rows_layers, args.rows_budget, args.rows_tokens)
    finally:
        if not args.keep:
            shutil.rmtree(args.out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
