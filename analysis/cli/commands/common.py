"""Helpers shared by subcommands: load what the arguments name, emit results.

The core (torch, fla, transformers) is imported inside the functions: building the parser and `--help`
stay fast.
"""
from __future__ import annotations

import sys

from analysis.cli.commands.checks import whole
from analysis.errors import AnalysisError


def add_text_args(p, tokens: int = 256, batch: int = 4) -> None:
    p.add_argument("--text", metavar="FILE", help="UTF-8 text file to analyse (default: a bundled split)")
    p.add_argument("--split", default="test", help="bundled split when --text is not given")
    p.add_argument("--tokens", type=whole(1), default=tokens, help="tokens per sequence")
    p.add_argument("--batch", type=whole(1), default=batch, help="number of sequences (consecutive windows)")
    p.add_argument("--stride", type=whole(1), default=1, help="collect states every K tokens (plus the last)")


def add_yes_arg(p) -> None:
    p.add_argument("--yes", action="store_true",
                   help="run work estimated at more than an hour on this machine (refused without it)")


def announce(line: str) -> None:
    """A one-line estimate before long work starts: on stderr (stdout stays for results), even with --quiet."""
    print(line, file=sys.stderr, flush=True)


def load(args):
    """(model, tokenizer, metadata) for the model the arguments name."""
    from analysis.models import load as models
    model = models.load_model(args.model, device=args.device, dtype=args.dtype)
    streamed_note(args, model)
    info = models.describe(model)
    meta = {"model": model.analysis_name, "source": model.analysis_source, "model_type": info.model_type,
            "device": info.device, "dtype": info.dtype}
    return model, models.load_tokenizer(model), meta


def streamed_note(args, model) -> None:
    """A model over the memory budget says so in one line on stderr, and draws a bar per pass over its blocks."""
    note = getattr(model, "analysis_streaming", None)
    if note:
        print(note, file=sys.stderr, flush=True)
        from analysis.cli.commands.progress import block_bar
        model.on_block = block_bar(args)


def text_batch(args, tokenizer, model):
    """([batch, tokens] ids, label) of what the model reads: the named text, or for a recall model its own
    recall sequences (analysis.models.model_inputs.model_batch, as the dashboard does), after checking the forward
    fits."""
    from analysis.data import inputs
    from analysis.models import limits
    from analysis.models.model_inputs import model_batch
    if inputs.recall_task(model) is None:
        require_text_model(model, tokenizer, args.command)
    stride = getattr(args, "stride", None)   # rank: the states of every stride-th token of a chunk, and the last
    states = True if stride is None or getattr(args, "every_token", False) else \
        -(-min(args.tokens, limits.CHUNK) // stride) + 1
    batch = model_batch(model, tokenizer, args.tokens, args.batch, text_file=args.text,
                        split=None if args.text else args.split, states=states)
    if batch.warning:
        print(f"warning: {batch.warning}.", file=sys.stderr)
    return batch.ids, batch.label


def require_text_model(model, tokenizer, command: str) -> None:
    """Commands that read text refuse a model whose vocabulary the tokenizer does not fit (recall models)."""
    if len(tokenizer) <= model.config.vocab_size:
        return
    from analysis.data.recall import task_of
    from analysis.models.load import command_name
    name = model.analysis_name
    try:
        task_of(model)
    except AnalysisError:
        raise AnalysisError(f"{name} has a vocabulary of {model.config.vocab_size} but its tokenizer produces "
                            f"{len(tokenizer)} ids, so `{command}` cannot feed it text; save the model with the "
                            "tokenizer it was trained with.") from None
    raise AnalysisError(f"{name} is an associative-recall model without a tokenizer, so `{command}` (which reads "
                        f"text) cannot run on it; use `python -m analysis ppl {command_name(model)} --split recall` "
                        "for its recall accuracy, `latency`, or the dashboard's pages, which feed it recall sequences.")


def emit(args, payload: dict, human: str) -> None:
    """JSON to --json (stdout with -), the human summary to stdout unless JSON already went there."""
    from analysis.io.json_out import write_json
    if args.json:
        write_json(payload, args.json)
    if args.json != "-":
        print(human)


def add_calib_args(p):
    """--calib-sequences, --calib-tokens, --seed: the calibration every strategy that reads data uses."""
    p.add_argument("--calib-sequences", type=whole(1), default=16,
                   help="Shakespeare train-split windows for calibration (recall models: synthetic recall "
                        "sequences of the model's task; wanda, grad, pca, drrqr; random and l1 use no data)")
    p.add_argument("--calib-tokens", type=whole(1), default=256, help="tokens per calibration window")
    p.add_argument("--seed", type=whole(0), default=0)


def calib_of(args):
    """The analysis.shrink.calibration.CalibrationSettings of `add_calib_args`' flags."""
    from analysis.shrink.calibration import CalibrationSettings
    return CalibrationSettings(args.calib_sequences, args.calib_tokens, args.seed)
