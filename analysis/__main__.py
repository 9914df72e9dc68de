"""`python -m analysis` (and the installed `state-rank` command): Ctrl-C prints `interrupted` and exits 130 from
the first line on.

analysis/__init__.py already ended the process on Ctrl-C while the package itself was imported; here the
same holds through the heavy imports (torch, transformers, fla), then Ctrl-C raises KeyboardInterrupt as
usual, so a save in progress removes its partial files (analysis.cli.main prints `interrupted`, exit 130), and
once the CLI has returned it ends the process at once again (interpreter shutdown).
"""
import signal
import sys

from analysis.runtime.interrupt import exit_interrupted


def main() -> int:
    """The CLI's exit status (the `state-rank` console command calls this)."""
    signal.signal(signal.SIGINT, exit_interrupted)  # before any heavy import
    try:
        from analysis.cli.main import main as cli_main
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = cli_main()
    except KeyboardInterrupt:  # one that arrived outside the CLI's own try (while the parser was built)
        signal.signal(signal.SIGINT, exit_interrupted)
        exit_interrupted()
    signal.signal(signal.SIGINT, exit_interrupted)
    return code


if __name__ == "__main__":
    sys.exit(main())
