"""State-rank analysis core: load fla linear-attention models, collect their states, measure and prune.

Importing the package is cheap (no torch, fla or transformers): `analysis.ready()` installs the CPU
execution path (pure torch) for fla's DeltaNet / Gated DeltaNet ops, leaving CUDA tensors on fla's
Triton kernels, and registers the project's pruned model types. Every loader calls it; call it yourself
before building a model or `AutoModelForCausalLM.from_pretrained` on a pruned one. Never imports streamlit.
"""
import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def ready() -> None:
    """Install the CPU path for fla's ops and register the pruned model types (idempotent; imports fla)."""
    from analysis.runtime import ready as _ready
    _ready()
