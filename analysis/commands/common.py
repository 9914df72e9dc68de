"""Helpers shared by subcommands: load what the arguments name, emit results."""
from __future__ import annotations

from analysis import inputs, models
from analysis.report import write_json


def add_text_args(p, tokens: int = 256, batch: int = 4) -> None:
    p.add_argument("--text", metavar="FILE", help="UTF-8 text file to analyse (default: a bundled split)")
    p.add_argument("--split", default="test", help="bundled split when --text is not given")
    p.add_argument("--tokens", type=int, default=tokens, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=batch, help="number of sequences (consecutive windows)")
    p.add_argument("--stride", type=int, default=1, help="collect states every K tokens (plus the last)")


def load(args):
    """(model, tokenizer, metadata) for the model the arguments name."""
    model = models.load_model(args.model, device=args.device, dtype=args.dtype)
    info = models.describe(model)
    meta = {"model": model.analysis_name, "source": model.analysis_source, "model_type": info.model_type,
            "device": info.device, "dtype": info.dtype}
    return model, models.load_tokenizer(model), meta


def text_batch(args, tokenizer, model):
    source = inputs.resolve_text(text_file=args.text, split=None if args.text else args.split)
    ids = inputs.token_batch(tokenizer, source, args.tokens, args.batch, vocab_size=model.config.vocab_size)
    return ids, source.label


def emit(args, payload: dict, human: str) -> None:
    """JSON to --json (stdout with -), the human summary to stdout unless JSON already went there."""
    if args.json:
        write_json(payload, args.json)
    if args.json != "-":
        print(human)
