"""Make fla runnable here, once per process, at the entry points that build or load a model.

`ready()` installs the project's CPU path for fla's ops (CUDA tensors keep fla's Triton kernels),
routes every family's kernel entry points and registers its pruned model types (`install_all`), and quiets
transformers' logging. It imports torch, fla and transformers (seconds), which is why it is called explicitly
by the loaders (`analysis.models.load.load_model`, the config checks, training) instead of as a side effect of
`import analysis`: `python -m analysis --help` and `models` never pay for it.
"""
from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()  # two dashboard sessions may load their first model at the same moment
_ready = False


def ready() -> None:
    """Install the CPU path and the project's model types (idempotent, thread-safe)."""
    global _ready
    if _ready:
        return
    with _lock, exit_on_ctrl_c():
        if _ready:
            return
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()  # progress bars and deprecation chatter would drown the CLI output
        hf_logging.disable_progress_bar()
        from analysis.runtime import backend
        backend.install()
        from analysis import archs
        archs.install_all()  # every family's kernel entry points and model types
        from analysis.archs import unrouted
        unrouted.install()   # the safety net's advice names the config flags to change
        _ready = True


@contextlib.contextmanager
def exit_on_ctrl_c():
    """In `python -m analysis`, Ctrl-C during these imports ends the process ("interrupted", exit 130): a
    KeyboardInterrupt raised inside a half-done import (numpy's, under transformers under fla) can leave that
    module broken and surface later as an unrelated traceback, and there is nothing to clean up yet."""
    import signal
    from analysis.runtime.interrupt import cli_run, exit_interrupted
    if not cli_run() or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, exit_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
