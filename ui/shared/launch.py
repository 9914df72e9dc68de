"""`python -m ui.shared.launch [streamlit options]`: the dashboard server, with the core imported before it serves.

Streamlit runs app.py only when a browser session connects, so under `streamlit run app.py` the first page
waits for torch, transformers and fla to import (about 10 s on a laptop CPU, most of it fla). This launcher
imports them first, then starts the server, which prints its URL when it listens: a page opened from that
URL finds them done. They are imported in the main thread, before the server exists, on purpose: a
background thread importing while a session's script imports the same packages can deadlock on Python's
module locks, and on 2 cores it would only slow the page being served.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from pathlib import Path

UI = Path(__file__).resolve().parents[1]
# A checkout runs <repo>/app.py; `pip install .` installs app.py and pages/ as the package ui.shell (pyproject.toml).
APP = next((p for p in (UI.parent / "app.py", UI / "shell" / "app.py") if p.is_file()), UI.parent / "app.py")
CONFIG = APP.parent / ".streamlit" / "config.toml"   # the checkout's settings, installed beside app.py too


def import_core() -> str:
    """Import what every page needs; one sentence on how it went (a failure is left for the page to show)."""
    start = time.perf_counter()
    try:
        import analysis
        analysis.ready()  # torch, transformers, fla and the project's routing
        import plotly.graph_objects  # noqa: F401  (the first chart's)
    except Exception as error:  # noqa: BLE001  the page's own import shows it again, where the user looks
        return f"Importing the analysis core failed ({type(error).__name__}: {error}); the dashboard will show why."
    return f"Imported torch, transformers and fla in {time.perf_counter() - start:.1f} s."


RAY_FLAG = "--ray-address"


def ray_address(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the --ray-address value, the other arguments): the launcher's own flag, taken out before Streamlit reads
    the rest; checked (host:port, ray://host:port, auto or local) without contacting anything."""
    rest, value, args = [], None, iter(argv)
    for arg in args:
        if arg == RAY_FLAG:
            value = next(args, "")
        elif arg.startswith(RAY_FLAG + "="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if value is None:
        return None, rest
    value = value.strip()
    if value != "local":
        from analysis.io.ray_executor import check_address
        check_address(value)  # AnalysisError: one sentence
    return value, rest


def main(argv: list[str]) -> int:
    from analysis.errors import AnalysisError
    try:
        address, argv = ray_address(argv)
    except AnalysisError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    if address:  # the pages read it once (ui.shared.cluster): every multi-point job submits its points there
        import os
        os.environ["STATE_RANK_RAY_ADDRESS"] = address
        print(f"Multi-point jobs (sensitivity map, Verify, sweeps) run their points on Ray "
              f"({'a local Ray' if address == 'local' else address}).", file=sys.stderr, flush=True)
    print("State-rank dashboard: importing torch, transformers and fla before the server starts "
          "(about 10 s on a laptop CPU)…", file=sys.stderr, flush=True)
    print(import_core(), file=sys.stderr, flush=True)
    from streamlit.web import cli
    sys.argv = ["streamlit", "run", str(APP), *argv]
    try:
        with jobs_told_at_once():
            return cli.main()
    finally:  # the server stopped (SIGTERM, Ctrl-C): end the background jobs before the interpreter does
        stop_jobs()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def jobs_told_at_once():
    """While the server runs, SIGTERM and SIGINT first tell the running jobs to stop (their threads end within a
    second, at the next window, batch or step), then reach the handler Streamlit installs: otherwise the jobs hear
    of it only after Streamlit has shut its server down, seconds later on a loaded host."""
    install = signal.signal

    def chained(number, handler):
        if number in STOP_SIGNALS and callable(handler):
            def stop_jobs_first(signum, frame):
                jobs = sys.modules.get("ui.shared.job_runner")  # imported once a page ran: no jobs otherwise
                if jobs is not None:  # in a thread: a handler that writes could interrupt a write of the main one
                    threading.Thread(target=jobs.stop_all, args=(signal.Signals(signum).name,), daemon=True).start()
                return handler(signum, frame)
            return install(number, stop_jobs_first)
        return install(number, handler)
    signal.signal = chained
    try:
        yield
    finally:
        signal.signal = install


def stop_jobs() -> None:
    """Stop the dashboard's running jobs and wait for their threads (a Save runs in its script thread, which
    the interpreter waits for anyway). Without this a job thread is killed inside a torch op at exit and the
    process aborts with exit 134."""
    jobs = sys.modules.get("ui.shared.job_runner")  # imported only once a page ran: no jobs otherwise
    if jobs is not None:
        stopped = jobs.shutdown()
        if stopped:
            print(f"Stopped {stopped} running job{'s' if stopped != 1 else ''} before exiting.",
                  file=sys.stderr, flush=True)


def config_flags(config: Path, given: list[str]) -> list[str]:
    """CONFIG as command-line flags (`--server.address 127.0.0.1` …), leaving out the options in `given`: Streamlit
    reads .streamlit/config.toml only from the working directory, which for an installed command is anywhere."""
    import tomllib
    try:
        sections = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        sections = {}
    settings = {"server": {"address": "127.0.0.1"}}   # never open to the network by default, config or not
    for section, options in sections.items():
        settings.setdefault(section, {}).update(options)
    named = {arg.split("=", 1)[0] for arg in given if arg.startswith("--")}
    flags = []
    for section, options in settings.items():
        for option, value in options.items():
            if f"--{section}.{option}" not in named:
                flags += [f"--{section}.{option}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags


def console() -> int:
    """The `state-rank-dashboard` command: the server on 127.0.0.1:8501 with the checkout's settings; any Streamlit
    option given on the command line wins (`state-rank-dashboard --server.port 8600`)."""
    given = sys.argv[1:]
    return main(config_flags(CONFIG, given) + given)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
