"""Ctrl-C for `python -m analysis` before the CLI's own handling is in place (and after it returned).

An uncaught KeyboardInterrupt makes Python print a traceback and kill itself with SIGINT (exit −2); while
imports run there is nothing to clean up, so the process prints `interrupted` and exits 130 at once.
"""
import os
import sys


def cli_run() -> bool:
    """True when this process is `python -m analysis …` or the installed `state-rank` command (not a library user,
    not the dashboard)."""
    argv = getattr(sys, "orig_argv", [])
    if len(argv) > 1 and os.path.basename(argv[1]) == "state-rank":
        return True
    return "-m" in argv[:-1] and argv[argv.index("-m") + 1] in ("analysis", "analysis.__main__")


def exit_interrupted(signum=None, frame=None):
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)
