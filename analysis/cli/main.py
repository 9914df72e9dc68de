"""`python -m analysis`: the headless face of the core. Every subcommand takes a model and `--json`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.errors import AnalysisError


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other error of the CLI (exit code 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see `{self.prog} --help`).\n")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="bundled sample name, local HF directory, or hub id org/name (from the local Hugging Face cache, else downloaded)")
    p.add_argument("--device", default="auto", help="auto (GPU if present), cpu or cuda")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: fp32 on CPU, bf16 on GPU)")
    p.add_argument("--json", metavar="PATH|-", help="write machine-readable results to PATH, or stdout with -")


def add_memory_arg(p: argparse.ArgumentParser) -> None:
    from analysis.cli.commands.checks import memory_size
    p.add_argument("--max-memory", type=memory_size, metavar="SIZE", default=None,
                   help="memory this command may use beyond the interpreter and its libraries, e.g. 4GiB or 500MiB "
                        "(default: half of the memory available); a model whose weights do not fit is read one "
                        "block at a time from its safetensors files")


def build_parser() -> argparse.ArgumentParser:
    from analysis.cli import commands
    installed = Path(sys.argv[0]).name == "state-rank"   # the console command `pip install .` makes
    parser = _Parser(prog="state-rank" if installed else "python -m analysis", description=(
        "State-rank analysis of linear-attention and state-space language models (fla and transformers "
        "families): recurrent-state rank, query-noise amplification, channel importance, pruning, perplexity "
        "and latency."))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (helptext, setup, run) in commands.COMMANDS.items():
        p = sub.add_parser(name, help=helptext, description=helptext)
        setup(p)
        if name not in ("models", "train", "card"):
            _model_args(p)
        if name != "models":
            add_memory_arg(p)
        elif name == "models":
            p.add_argument("--json", metavar="PATH|-", help="write the list to PATH, or stdout with -")
        p.add_argument("--quiet", action="store_true", help="no progress bars on stderr")
        p.set_defaults(run=run)
    return parser


def _check_json_outside_out(args) -> None:
    """--json into the --out directory (or equal to it) would be refused, or clobbered, only after the work."""
    import os
    out = getattr(args, "out", None)
    if not out or args.json == "-":
        return
    from analysis.io.writes import show
    json_path = os.path.realpath(os.path.expanduser(args.json))
    out_path = os.path.realpath(os.path.expanduser(out))
    if json_path == out_path or json_path.startswith(out_path.rstrip(os.sep) + os.sep):
        raise AnalysisError(f"--json {show(args.json)} is {'the same path as' if json_path == out_path else 'inside'} "
                            f"--out {show(out)}, which the command writes as a whole; put the JSON elsewhere.")


LIGHT_COMMANDS = ("models",)  # commands that never import torch (fast `models`; tests/runtime/test_start.py)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed as one line)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if getattr(args, "json", None):  # a bad --json path is refused before the work, not after it
            from analysis.io.writes import check_file_destination
            check_file_destination(args.json)
            _check_json_outside_out(args)
        if args.command not in LIGHT_COMMANDS:
            from analysis.archs.install import exit_on_ctrl_c, ready
            with exit_on_ctrl_c():  # Ctrl-C during the heavy imports ends the process at once (nothing to clean
                ready()             # up yet; a KeyboardInterrupt inside a half-done import can break numpy/torch)
            from analysis.models import budget
            budget.note_baseline()  # what --max-memory counts from: the interpreter and its libraries
        from analysis.models.budget import budget_scope
        with budget_scope(getattr(args, "max_memory", None)):
            args.run(args)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file the checks above did not foresee (a disk full, a path gone meanwhile)
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}; check the paths given and their permissions.", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
