"""train: fit a small model reproducibly (CPU torch path, or fla's kernels on GPU)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from analysis.archs import TRAINABLE
from analysis.cli.commands.checks import real, whole
from analysis.cli.commands.common import emit
from analysis.cli.commands.progress import counted, say
from analysis.errors import AnalysisError


def _setup_train(p):
    p.add_argument("--out", required=True, help="directory for the final model (must not exist; with --resume it may be "
                   "one this tool wrote, which is then replaced)")
    p.add_argument("--work", help="checkpoint directory (default: runs/<out name>)")
    p.add_argument("--arch", default=TRAINABLE[0], choices=TRAINABLE)
    p.add_argument("--task", default="lm", choices=["lm", "recall"])
    for name, kind, default in [("hidden-size", whole(1), 256), ("layers", whole(1), 4), ("heads", whole(1), 4),
                                ("head-dim", whole(1, 256), 64), ("seq-len", whole(2), 256), ("batch", whole(1), 8),
                                ("steps", whole(1), 1000), ("lr", real(1e-12, 10), 2e-3), ("warmup", whole(0), 100),
                                ("eval-every", whole(1), 100), ("checkpoint-every", whole(1), 200),
                                ("seed", whole(0), 0), ("recall-pairs", whole(1), 16), ("recall-keys", whole(1), 128)]:
        p.add_argument(f"--{name}", type=kind, default=default)
    p.add_argument("--key-heads", type=whole(1), default=None, help="hybrids (Qwen3.5): linear-attention key heads "
                   "(--heads counts value heads; default heads // 2)")
    p.add_argument("--intermediate-size", type=whole(1), default=None, help="hybrids (Qwen3.5): MLP width (default 2 × hidden)")
    p.add_argument("--full-attention-interval", type=whole(1), default=4,
                   help="hybrids (Qwen3.5): every N-th block is softmax attention (default 4: three linear blocks per full one)")
    p.add_argument("--model-type", default=None, help="Mamba-2 (--arch mamba2): nemotron_h (default) or "
                   "granitemoehybrid (Granite 4.0-H layout, dense MLP, tied embeddings)")
    p.add_argument("--state-size", type=whole(1, 256), default=None, help="Mamba-2: the state size N, i.e. the key "
                   "dim (default --head-dim)")
    p.add_argument("--max-minutes", type=real(1e-6), default=None, help="stop cleanly after this much training time")
    p.add_argument("--stop-at", type=whole(1), default=None, help="stop cleanly after this step; the learning-rate "
                   "schedule still follows --steps, so --resume can continue the same run (or shorten it)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --work")
    p.add_argument("--yes", action="store_true", help="train even when the modelled time is over an hour")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", metavar="PATH|-", help="write the training history to PATH, or stdout with -")


def run_train(args) -> None:
    from analysis.data import corpus as data
    from analysis.io.model_dir import save_model_dir
    from analysis.io.writes import check_new_dir
    from analysis.train.trainer import TrainConfig, train
    _check_train_args(args)
    hint = "choose a new --out directory (or pass --resume)"
    out = check_new_dir(args.out, overwrite=args.resume, exists_hint=hint)  # before training, not after
    work = Path(args.work or Path("runs") / out.name)
    if os.path.commonpath([out, os.path.abspath(work)]) in (str(out), os.path.abspath(work)):
        raise AnalysisError("--work and --out must be separate folders, neither inside the other; choose another "
                            "--work.")
    cfg = TrainConfig(out=str(work), arch=args.arch, task=args.task, hidden_size=args.hidden_size,
                      layers=args.layers, heads=args.heads, head_dim=args.head_dim, seq_len=args.seq_len,
                      batch=args.batch, steps=args.steps, lr=args.lr, warmup=args.warmup,
                      eval_every=args.eval_every, checkpoint_every=args.checkpoint_every,
                      max_minutes=args.max_minutes, stop_at=args.stop_at, seed=args.seed, device=args.device,
                      recall_pairs=args.recall_pairs, recall_keys=args.recall_keys, key_heads=args.key_heads,
                      intermediate_size=args.intermediate_size,
                      full_attention_interval=args.full_attention_interval, model_type=args.model_type,
                      state_size=args.state_size)
    with counted(args, "train: steps", "step") as progress:  # the log lines are in the --json history too
        model, cfg = train(cfg, resume=args.resume, log=lambda line: say(args, line), progress=progress,
                           note=lambda line: say(args, line) if args.json != "-" else
                           print(line, file=sys.stderr))  # where training starts is always said

    # --resume may replace an earlier final model, but only one this project wrote (analysis.io.writes)
    save_model_dir(model, out, tokenizer=data.load_tokenizer() if args.task == "lm" else None,
                   json_files={"training.json": {**cfg.__dict__, "betas": list(cfg.betas)}},
                   overwrite=args.resume, kind="trained model", exists_hint=hint)
    emit(args, {"history": cfg.history}, f"saved {args.out}")


def _check_train_args(args) -> None:
    """Settings that are each valid but impossible together, or too big for this machine: refused up front."""
    from analysis.models import limits
    if args.task == "recall" and args.recall_pairs > args.recall_keys:
        raise AnalysisError(f"--recall-pairs ({args.recall_pairs}) cannot exceed --recall-keys ({args.recall_keys}): "
                            "each stored pair needs its own key.")
    vocab = 1 + 2 * args.recall_keys if args.task == "recall" else 8192
    key = args.heads * args.head_dim
    per_layer = 4 * args.hidden_size * key + 3 * args.hidden_size * 4 * args.hidden_size
    params = vocab * args.hidden_size + args.layers * per_layer
    tokens = args.batch * args.seq_len
    activations = 3 * tokens * vocab * 4 + args.layers * tokens * (16 * args.hidden_size + 4 * key) * 4
    device = args.device if args.device in ("cpu", "cuda") else "cpu"
    limits.require(16 * params + activations,  # fp32 weights, gradients, two AdamW moments
                   f"Training {params:,} parameters on batches of {args.batch} × {args.seq_len} tokens",
                   "use a smaller model or batch", device)
    if args.max_minutes is None or args.max_minutes > 60:  # --max-minutes already bounds the time
        from analysis.models import workload
        from analysis.cli.commands.common import announce
        steps = (args.stop_at or args.steps)
        workload.check_modelled(f"Training {params:,} parameters", steps, 6 * params * tokens,
                                "use fewer --steps (or --stop-at / --max-minutes)", args.yes, announce, device)


COMMANDS = {"train": ("train a small model of a trainable family (--arch; language modelling or associative recall)",
                      _setup_train, run_train)}


def _setup_card(p):
    p.add_argument("model", help="a trained model directory or bundled sample name (must hold training.json)")
    p.add_argument("--json", metavar="PATH|-", help="also write the card's numbers to PATH, or stdout with -")
    p.add_argument("--out", metavar="DIR", help="write README.md and card.json into DIR (a new directory, or a card "
                                                "folder written before) instead of the model's directory, which must "
                                                "be one this tool wrote")
    p.add_argument("--in-place", action="store_true", help="a bundled sample: rewrite the card in its own folder "
                                                           "(the sample scripts do; everyone else uses --out)")


def run_card(args) -> None:
    from analysis.inspect.model_card import write_card
    card, folder = write_card(args.model, args.out, args.in_place)
    where = "" if args.out is None else f" in {folder}"
    emit(args, card, f"wrote README.md and card.json for {card['name']}{where}")


COMMANDS["card"] = ("measure a trained model and write its model card (README.md + card.json)", _setup_card, run_card)
