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
from analysis.archs import kda_pruned as _kda_pruned  # noqa: E402,F401  (registers pruned_kda)
from analysis.archs.kda import ADAPTER as _kda_adapter  # noqa: E402

_kda_adapter.install_routing()  # KDA's kernel entry points take the torch path on CPU
