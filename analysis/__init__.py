"""State-rank analysis core: load fla linear-attention models, collect their states, measure and prune.

Importing the package installs the CPU execution path (pure torch) for fla's DeltaNet / Gated DeltaNet
ops, leaving CUDA tensors on fla's Triton kernels, and registers the project's pruned model types.
Never imports streamlit.
"""
import os
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# fla warns at import that Triton has no CPU driver; that is expected here: the torch path takes over.
warnings.filterwarnings("ignore", message=".*Triton is not supported.*")
warnings.filterwarnings("ignore", message=".*roll back to CPU.*")

from transformers.utils import logging as _hf_logging  # noqa: E402

_hf_logging.set_verbosity_error()  # progress bars and deprecation chatter would drown the CLI output
_hf_logging.disable_progress_bar()

from analysis import backend as _backend  # noqa: E402

_backend.install()

from analysis import pruned_models as _pruned_models  # noqa: E402,F401

# transformers' Qwen3.5 / Qwen3-Next / OLMo-hybrid GDN layers call fla's Triton kernels whenever fla is installed:
# route them by device too, and register their per-layer pruned types (analysis.archs.qwen3_5).
from analysis.archs import qwen3_5 as _qwen3_5  # noqa: E402

_qwen3_5.ADAPTER.install_routing()
