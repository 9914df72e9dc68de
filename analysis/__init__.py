"""State-rank analysis core: load fla linear-attention models, collect their states, measure and prune.

Importing the package is cheap (no torch, fla or transformers): `analysis.ready()` installs the CPU
execution path (pure torch) for every supported family's recurrence ops, leaving CUDA tensors on the
families' own kernels, and registers the project's pruned model types. Every loader calls it; call it yourself
before building a model or `AutoModelForCausalLM.from_pretrained` on a pruned one. Never imports streamlit.
"""
import os
import sys

if sys.argv[:1] == ["-m"]:  # being located by `python -m`: Ctrl-C from here on is "interrupted", exit 130
    from analysis.runtime.interrupt import cli_run, exit_interrupted
    if cli_run():
        import _signal  # the C module: `signal` would first build its enums (imports enum, ~10 ms unprotected)
        _signal.signal(_signal.SIGINT, exit_interrupted)

import warnings  # noqa: E402  (after the handler: compiling the filters below takes a few ms)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads sleep at once when they run out of work instead of spinning first (libgomp's default). On a
# shared or busy machine (other sessions, other processes) a spinning thread takes the core from the thread its
# team waits for: a forward pass measured 4-7x slower at load 12-15 on 2 cores (docs/serving.md, "Speed on a shared CPU host"). Set before torch
# loads libgomp; an OMP_WAIT_POLICY of your own is kept. Results do not change (same threads, same reductions).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# fla warns at import that Triton has no CPU driver; that is expected here: the torch path takes over.
warnings.filterwarnings("ignore", message=".*Triton is not supported.*")
warnings.filterwarnings("ignore", message=".*roll back to CPU.*")


def ready() -> None:
    """Install the CPU path for fla's ops and register the pruned model types (idempotent; imports fla)."""
    from analysis.archs.install import ready as _ready
    _ready()
