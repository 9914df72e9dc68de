"""train: fit a small model reproducibly (CPU torch path, or fla's kernels on GPU)."""
from __future__ import annotations

import json
from pathlib import Path

from analysis.commands.common import emit


def _setup_train(p):
    p.add_argument("--out", required=True, help="directory for the final model (must not exist; with --resume it may be "
                   "one this tool wrote, which is then replaced)")
    p.add_argument("--work", help="checkpoint directory (default: runs/<out name>)")
    p.add_argument("--arch", default="delta_net", choices=["delta_net", "gated_deltanet"])
    p.add_argument("--task", default="lm", choices=["lm", "recall"])
    for name, kind, default in [("hidden-size", int, 256), ("layers", int, 4), ("heads", int, 4),
                                ("head-dim", int, 64), ("seq-len", int, 256), ("batch", int, 8),
                                ("steps", int, 1000), ("lr", float, 2e-3), ("warmup", int, 100),
                                ("eval-every", int, 100), ("checkpoint-every", int, 200), ("seed", int, 0),
                                ("recall-pairs", int, 16), ("recall-keys", int, 128)]:
        p.add_argument(f"--{name}", type=kind, default=default)
    p.add_argument("--max-minutes", type=float, default=None, help="stop cleanly after this much training time")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --work")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", metavar="PATH|-", help="write the training history to PATH, or stdout with -")


def run_train(args) -> None:
    from analysis import data
    from analysis.safe_io import check_new_dir, write_model_dir
    from analysis.train import TrainConfig, train
    hint = "choose a new --out directory (or pass --resume)"
    out = check_new_dir(args.out, overwrite=args.resume, exists_hint=hint)  # before training, not after
    work = Path(args.work or Path("runs") / out.name)
    cfg = TrainConfig(out=str(work), arch=args.arch, task=args.task, hidden_size=args.hidden_size,
                      layers=args.layers, heads=args.heads, head_dim=args.head_dim, seq_len=args.seq_len,
                      batch=args.batch, steps=args.steps, lr=args.lr, warmup=args.warmup,
                      eval_every=args.eval_every, checkpoint_every=args.checkpoint_every,
                      max_minutes=args.max_minutes, seed=args.seed, device=args.device,
                      recall_pairs=args.recall_pairs, recall_keys=args.recall_keys)
    model, cfg = train(cfg, resume=args.resume, log=lambda line: print(line, flush=True))

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if args.task == "lm":
            data.load_tokenizer().save_pretrained(tmp)
        (tmp / "training.json").write_text(json.dumps({**cfg.__dict__, "betas": list(cfg.betas)}, indent=2))
    # --resume may replace an earlier final model, but only one this project wrote (analysis.safe_io)
    write_model_dir(out, fill, overwrite=args.resume, kind="trained model", exists_hint=hint)
    emit(args, {"history": cfg.history}, f"saved {args.out}")


COMMANDS = {"train": ("train a small DeltaNet / Gated DeltaNet (language modelling or associative recall)",
                      _setup_train, run_train)}


def _setup_card(p):
    p.add_argument("model", help="a trained model directory or bundled sample name (must hold training.json)")
    p.add_argument("--json", metavar="PATH|-", help="also write the card's numbers to PATH, or stdout with -")


def run_card(args) -> None:
    from analysis.model_card import write_card
    card = write_card(args.model)
    emit(args, card, f"wrote README.md and card.json for {card['name']}")


COMMANDS["card"] = ("measure a trained model and write its model card (README.md + card.json)", _setup_card, run_card)
