"""Find, validate and load fla models (bundled samples, local HF directories, hub ids) on CPU or GPU."""
from __future__ import annotations

import os
import re
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from analysis.models import checkpoint, limits
from analysis.models.stream import plan as stream_plan
from analysis.models.stream.files import CheckpointFiles
from analysis.archs import adapter_for, family_of, get_adapter, is_pruned_type
from analysis.models.channel_group import fp32_state_bytes
from analysis.models.key_plan import tiles
from analysis.models.layers import LinearLayer, attention_layers, linear_layers  # noqa: F401  (re-exported)
from analysis.archs.kernels import TILE_ROWS  # noqa: F401  (re-exported: the pages draw tile boundaries)
from analysis.errors import AnalysisError
from analysis.io import reads
from analysis.models import samples as _samples
from analysis.models.samples import REPO_ROOT, SAMPLES_DIR, SampleInfo  # noqa: F401

MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few KiB; a bigger one is not a config
READ_SUFFIXES = (".json", ".safetensors", ".txt", ".model")  # files a load may open: none may be a FIFO or device

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def scan_samples() -> tuple[list[SampleInfo], list[tuple[str, str]]]:
    """(bundled checkpoints, [(folder, why it was skipped)]) of SAMPLES_DIR (see analysis.models.samples)."""
    return _samples.scan_samples(SAMPLES_DIR)


def list_samples() -> list[SampleInfo]:
    """Bundled checkpoints that can be read (see scan_samples for the skipped ones)."""
    return scan_samples()[0]


def resolve_device(device: str = "auto") -> torch.device:
    device = (device or "auto").lower()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device in ("gpu", "cuda") or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise AnalysisError("A CUDA device was requested but this machine has no usable GPU; "
                                "use --device cpu (or auto).")
        return torch.device("cuda" if device == "gpu" else device)
    if device == "cpu":
        return torch.device("cpu")
    raise AnalysisError(f"Unknown device {device!r}; use auto, cpu or cuda.")


def resolve_dtype(dtype, device: torch.device, kernel=None) -> torch.dtype:
    """float32 on CPU (the torch path is exact there); on a GPU the dtype the family's kernel takes
    (`kernel`: its KernelSpec; its default for "auto", one sentence for a dtype it refuses)."""
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    if dtype not in (None, "auto") and dtype not in DTYPES:
        raise AnalysisError(f"Unknown dtype {dtype!r}; use one of float32, bfloat16, float16.")
    if device.type == "cuda":
        dtype = kernel.gpu_dtype(dtype) if kernel is not None else dtype if dtype not in (None, "auto") else "bfloat16"
    return DTYPES[dtype if dtype not in (None, "auto") else "float32"]


def resolve_source(source: str) -> Path:
    """A bundled sample name, a local directory or a hub id (from the local HF cache, else fetched) → a
    validated model directory."""
    if not source or not str(source).strip():
        raise AnalysisError("No model given; pass a bundled sample name, a local directory or a hub id.")
    source = str(source).strip()
    try:
        path = Path(source).expanduser()
        if _is_sample_name(source):
            path = SAMPLES_DIR / source
        elif not path.exists():
            if _looks_like_hub_id(source):
                _check_hub_id(source)
                path = _download_from_hub(source)
            else:
                names = ", ".join(s.name for s in list_samples()) or "none bundled"
                raise AnalysisError(f"No model named {_short(source)!r}: it is not a bundled sample ({names}), "
                                    "an existing directory or a hub id of the form org/name.")
        _validate_directory(path)
    except OSError as exc:  # a name too long for the file system, a folder that cannot be read, a link loop
        raise AnalysisError(f"The model path {_short(source)!r} cannot be used ({exc.strerror or exc}); "
                            "give a readable folder written by save_pretrained.") from None
    return path


def _short(text: str, keep: int = 160) -> str:
    """A user's input cut to a readable length for a message (a 5,000-character path stays short): both ends."""
    half = keep // 2
    return text if len(text) <= keep else f"{text[:half]}…{text[-half:]} ({len(text):,} characters)"


def _is_sample_name(source: str) -> bool:
    return (os.sep not in source and not source.startswith(".") and len(source) < 256
            and (SAMPLES_DIR / source / "config.json").exists())


def _looks_like_hub_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "/", "~"))


_HUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")


def _check_hub_id(repo_id: str) -> None:
    """The hub's own rules for org/name (ASCII letters, digits, - _ .), checked before any network call."""
    if not all(_HUB_NAME.fullmatch(part) and "--" not in part and ".." not in part for part in repo_id.split("/")):
        raise AnalysisError(f"{_short(repo_id)!r} is neither an existing directory nor a valid hub id: a hub id is "
                            "org/name with ASCII letters, digits, '-', '_' and '.' only.")


def _download_from_hub(repo_id: str) -> Path:
    """The hub id's snapshot in the local Hugging Face cache (HF_HUB_CACHE, or HF_HOME/hub) when it is there,
    without touching the network; else downloaded, unless HF_HUB_OFFLINE is set."""
    from huggingface_hub import constants, snapshot_download
    patterns = ["*.json", "*.safetensors", "*.txt", "*.model"]
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError) or an unreadable cache: try the hub
        pass
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}:
        raise AnalysisError(f"{repo_id!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                            "HF_HUB_OFFLINE is set; download it there once (`hf download "
                            f"{repo_id}`), point HF_HUB_CACHE or HF_HOME at the cache that holds it, or pass its "
                            "folder.")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, etag_timeout=5))
    except Exception as exc:  # offline, unknown repo, gated repo: all end the same way for the user
        raise AnalysisError(f"Could not fetch {repo_id!r} from the Hugging Face hub ({type(exc).__name__}) and it is "
                            f"not in the local cache ({constants.HF_HUB_CACHE}); the machine may be offline: use "
                            "a bundled sample or a local directory.") from None


_SPECIAL_FLOATS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _special_float(obj: dict):
    """transformers saves inf/nan as {"__float__": "Infinity"} (e.g. Mamba-2's time_step_limit); decode them as it does."""
    if set(obj) == {"__float__"} and obj["__float__"] in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[obj["__float__"]]
    return obj


def read_config(path: Path) -> dict:
    """config.json as a dict whose model_type and sizes have been checked (one sentence otherwise)."""
    where = path / "config.json"
    hint = "re-save the model with save_pretrained"
    try:  # bounded, regular files only: a FIFO or a link to /dev/zero named config.json is one sentence
        config = reads.loads(reads.read_bytes(where, MAX_CONFIG_BYTES, "The config", hint).decode("utf-8"),
                             str(where), hint, object_hook=_special_float)
    except (OSError, ValueError) as exc:  # also JSONDecodeError and UnicodeDecodeError
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise AnalysisError(f"{path / 'config.json'} cannot be read as JSON ({reason}); "
                            "re-save the model with save_pretrained.") from None
    return checkpoint.validate_config(config, path)


def _validate_directory(path: Path) -> dict:
    """The headers {tensor: shape} of a directory that looks like a supported safetensors checkpoint."""
    if not path.is_dir():
        raise AnalysisError(f"{path} is not a directory; pass a folder written by save_pretrained.")
    if not (path / "config.json").exists():
        raise AnalysisError(f"{path} has no config.json, so it is not a Hugging Face model directory; "
                            "pass a folder written by save_pretrained.")
    for file in sorted(path.iterdir()):  # every file a load reads (config, weights, tokenizer, training.json)
        if file.suffix in READ_SUFFIXES:
            reads.check_regular(file, "Model file", "remove it or pass a folder written by save_pretrained")
    read_config(path)
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        extra = " (only PyTorch .bin weights found; convert them to safetensors)" if list(path.glob("*.bin")) else ""
        raise AnalysisError(f"{path} has no .safetensors weights{extra}; only safetensors checkpoints are loaded.")
    return CheckpointFiles(path)


def check_loadable(path: Path, dtype: torch.dtype, device: torch.device) -> CheckpointFiles | None:
    """Before building anything: the files hold exactly the model's tensors, and the model fits in memory — or,
    when it does not, its weights can be streamed one block at a time (then its files are returned)."""
    try:
        files = _validate_directory(path)
    except OSError as exc:
        raise AnalysisError(f"{path} cannot be read ({exc.strerror or exc}); check that the folder and its "
                            "files are readable.") from None
    config = read_config(path)
    params = limits.parameter_count(config)
    streamed = not limits.model_fits(params, dtype, device)
    if streamed and not stream_plan.streamable(files, params, device):
        limits.check_model_fits(params, dtype, device, str(path))  # refuses, as for any model over the budget
    checkpoint.check_tensors(path, config, files.headers())
    return files if streamed else None


def load_model(source: str, device: str = "auto", dtype=None):
    """Load a supported fla causal LM for inference: eval mode, on the chosen device and dtype.

    On CPU the project's torch path runs the model; on CUDA fla's Triton kernels do. Only safetensors
    weights are read and remote code is never trusted.
    """
    from analysis.archs.install import ready
    ready()  # the CPU path for fla's ops and the project's model types
    from transformers import AutoModelForCausalLM

    from analysis.io.swap import recover_target
    recover_target(source)  # a replace of this folder that was interrupted is finished (or undone) first
    path = resolve_source(source)
    dev = resolve_device(device)
    config = read_config(path)
    adapter = adapter_for(config)
    dt = resolve_dtype(dtype, dev, adapter.kernel_spec)
    streamed = check_loadable(path, dt, dev)
    adapter.install_routing()
    if streamed is not None:  # over the memory budget: one block at a time (analysis.models.stream)
        model = stream_plan.open_streamed(path, config, streamed, adapter, dt, dev)
        model.analysis_source = str(path)
        model.analysis_name = Path(source).name if (SAMPLES_DIR / str(source)).exists() else str(source)
        model.analysis_arg = command_arg(source)
        return model
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, use_safetensors=True,
                                                     trust_remote_code=False)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "no message"
        raise AnalysisError(f"Loading {path} failed ({type(exc).__name__}: {first}); "
                            "check that the weights match config.json.") from None
    model = model.to(dev).eval()
    # a pruned model whose key dims the family's GPU kernel cannot run: one sentence here, not a kernel crash later
    adapter.check_key_dims([adapter.key_dim(layer) for layer in adapter.linear_layers(model)], dev.type)
    model.analysis_source = str(path)
    model.analysis_name = Path(source).name if (SAMPLES_DIR / str(source)).exists() else str(source)
    model.analysis_arg = command_arg(source)
    return model


def command_arg(source) -> str:
    """How a printed command (a hint) names the model `source` named, so that it runs from any directory: a
    bundled sample's name or a hub id as given, a local folder by its absolute path; quoted for a shell."""
    import shlex
    source = str(source).strip()
    if _is_sample_name(source) or not Path(source).expanduser().exists():
        return shlex.quote(source)
    return shlex.quote(os.path.abspath(os.path.expanduser(source)))


def command_name(model) -> str:
    """command_arg of a loaded model (its source folder for one built in memory)."""
    arg = getattr(model, "analysis_arg", None)
    return arg if arg is not None else command_arg(getattr(model, "analysis_source", None) or "MODEL")


def load_tokenizer(source_or_model):
    """The tokenizer saved beside the model, else the bundled one (the samples are trained with it)."""
    from analysis.data import corpus as data
    path = Path(getattr(source_or_model, "analysis_source", source_or_model))
    if (path / "tokenizer.json").exists():
        return data.load_tokenizer(path)
    return data.load_tokenizer()


def tokenizer_note(source_or_model) -> str | None:
    """None when the model directory has its own tokenizer; else the sentence that says which one reads its text."""
    from analysis.data import corpus as data
    path = Path(getattr(source_or_model, "analysis_source", source_or_model))
    if (path / "tokenizer.json").exists():
        return None
    where = data.TOKENIZER_DIR.relative_to(data.TOKENIZER_DIR.parents[1])
    return (f"{path.name} has no tokenizer.json, so its text is read with the bundled tokenizer ({where}/, the one "
            "the bundled samples were trained with); token ids the model's vocabulary lacks are refused.")


def type_label(model_type: str) -> str:
    """A model type in words: its family's label (+ "per-layer key dims" for the project's pruned types)."""
    family = family_of(model_type)
    if family is None:
        return model_type
    label = get_adapter(family).label
    return f"{label} (per-layer key dims)" if is_pruned_type(model_type) else label


@dataclass
class BlockInfo:
    block: int
    kind: str                              # linear / softmax / other
    linear_layer: int | None               # index among the linear layers
    head_k_dim: int | None = None
    key_heads: int | None = None
    value_heads: int | None = None
    head_v_dim: int | None = None
    state_bytes_per_sequence: int | None = None     # fp32 state of a linear layer
    kv_cache_bytes_per_token: int | None = None     # a softmax layer's KV cache grows by this per token
    label: str = ""                                  # what the block is, in words (the family's adapter says)
    cache_note: str | None = None                   # what a softmax layer caches when not plain K/V (MLA's latent)


@dataclass
class ArchitectureInfo:
    model_type: str
    label: str
    layers: int
    heads: int
    value_heads: int
    head_k_dims: list[int]
    head_v_dim: int
    hidden_size: int
    vocab_size: int
    parameters: int
    state_bytes_per_sequence: int  # fp32 recurrent states of all layers (fla keeps them in fp32)
    conv_state_bytes_per_sequence: int
    key_tiles_per_head: list[int]
    device: str
    dtype: str
    family: str = ""
    kernel: str = ""                                         # the kernel `latency` times (analysis.evaluate.latency.KERNELS)
    blocks: list[BlockInfo] = field(default_factory=list)   # every block in order, softmax ones labelled
    kv_cache_bytes_per_token: int = 0                        # all softmax blocks together (0 without any)
    query_l2_normalised: bool = True                         # the kernel l2-normalises q and k (Mamba-2: no)
    value_heads_per_layer: list[int] = field(default_factory=list)   # per linear layer (a head prune differs)
    key_heads_per_layer: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


_DESCRIBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> ((device, dtype), its summary)


def describe(model) -> ArchitectureInfo:
    """Architecture summary read from the modules themselves (so per-layer key dims are exact); computed once
    per model and device/dtype (a model's structure never changes after it is built). Read it, never edit it."""
    param = next(model.parameters())
    where = (str(param.device), param.dtype)
    known = _DESCRIBED.get(model)
    if known is None or known[0] != where:
        known = _DESCRIBED[model] = (where, _describe(model))
    return known[1]


def _describe(model) -> ArchitectureInfo:
    adapter = adapter_for(model)
    layers = linear_layers(model)
    param = next(model.parameters())
    by_block = {layer.block: layer for layer in layers}
    blocks = []
    for block, label in zip(adapter.blocks(model), adapter.block_labels(model)):
        layer = by_block.get(block.index)
        if layer is not None:
            blocks.append(BlockInfo(block.index, block.kind, layer.index, layer.key_dim, layer.key_heads,
                                    layer.value_heads, layer.value_dim,
                                    fp32_state_bytes(layer.value_heads, layer.key_dim, layer.value_dim), label=label))
        elif block.kind == "softmax":
            blocks.append(BlockInfo(block.index, block.kind, None, kv_cache_bytes_per_token=adapter.softmax_cache_bytes(
                block.module, 1, param.element_size()), label=label,
                cache_note=adapter.softmax_cache_note(block.module)))
        else:
            blocks.append(BlockInfo(block.index, block.kind, None, label=label))
    conv = 0
    for layer in layers:  # every short convolution of the layer keeps (width) inputs per channel
        for name, p in layer.module.named_parameters():
            if "conv" in name and name.endswith("weight") and p.dim() >= 2:
                conv += p.shape[0] * p.shape[-1] * param.element_size()
    dks = [layer.key_dim for layer in layers]
    model_type = model.config.model_type
    return ArchitectureInfo(
        model_type=model_type, label=type_label(model_type), layers=len(layers),
        heads=layers[0].key_heads, value_heads=layers[0].value_heads, head_k_dims=dks, head_v_dim=layers[0].value_dim,
        hidden_size=model.config.hidden_size, vocab_size=model.config.vocab_size,
        parameters=sum(p.numel() for p in model.parameters()),
        state_bytes_per_sequence=sum(b.state_bytes_per_sequence or 0 for b in blocks),
        conv_state_bytes_per_sequence=conv, key_tiles_per_head=tiles(dks),
        device=str(param.device), dtype=str(param.dtype).replace("torch.", ""), family=adapter.family,
        kernel=adapter.kernel, blocks=blocks, kv_cache_bytes_per_token=sum(b.kv_cache_bytes_per_token or 0 for b in blocks),
        query_l2_normalised=adapter.qk_l2_normalised, value_heads_per_layer=[l.value_heads for l in layers],
        key_heads_per_layer=[l.key_heads for l in layers])
