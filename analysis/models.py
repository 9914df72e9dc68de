"""Find, validate and load fla models (bundled samples, local HF directories, hub ids) on CPU or GPU."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from analysis.errors import AnalysisError

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLES_DIR = REPO_ROOT / "sample_models"
TILE_ROWS = 64  # fla's chunk kernel keeps the state in 64-row tiles of the key dimension

# model_type -> human label; the pruned types are registered by analysis.pruned_models.
SUPPORTED_TYPES = {
    "delta_net": "DeltaNet",
    "gated_deltanet": "Gated DeltaNet",
    "pruned_delta_net": "DeltaNet (per-layer key dims)",
    "pruned_gated_deltanet": "Gated DeltaNet (per-layer key dims)",
}
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


@dataclass
class SampleInfo:
    name: str
    path: str
    model_type: str
    description: str


def list_samples() -> list[SampleInfo]:
    """Bundled checkpoints: folders of sample_models/ that hold a config.json."""
    samples = []
    for cfg in sorted(SAMPLES_DIR.glob("*/config.json")):
        config = json.loads(cfg.read_text())
        card = cfg.parent / "README.md"
        description = config.get("analysis_description") or (
            _first_paragraph(card.read_text()) if card.exists() else "")
        samples.append(SampleInfo(cfg.parent.name, str(cfg.parent), config.get("model_type", "?"), description))
    return samples


def _first_paragraph(markdown: str) -> str:
    for block in markdown.split("\n\n"):
        block = block.strip()
        if block and not block.startswith(("#", "---", "|", "!")):
            return " ".join(block.split())
    return ""


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


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    if dtype is None or dtype == "auto":
        # fla's DeltaNet chunk kernel refuses fp32 on GPU; the CPU path is exact in fp32.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise AnalysisError(f"Unknown dtype {dtype!r}; use one of float32, bfloat16, float16.")
    return DTYPES[dtype]


def resolve_source(source: str) -> Path:
    """A bundled sample name or a local directory → a validated model directory (hub ids are fetched)."""
    if not source or not str(source).strip():
        raise AnalysisError("No model given; pass a bundled sample name, a local directory or a hub id.")
    source = str(source).strip()
    path = Path(source).expanduser()
    if (SAMPLES_DIR / source / "config.json").exists() and os.sep not in source:
        path = SAMPLES_DIR / source
    elif not path.exists():
        if _looks_like_hub_id(source):
            path = _download_from_hub(source)
        else:
            names = ", ".join(s.name for s in list_samples()) or "none bundled"
            raise AnalysisError(f"No model named {source!r}: it is not a bundled sample ({names}), "
                                "an existing directory or a hub id of the form org/name.")
    _validate_directory(path)
    return path


def _looks_like_hub_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not source.startswith((".", "/", "~"))


def _download_from_hub(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"],
                                      etag_timeout=5))
    except Exception as exc:  # offline, unknown repo, gated repo: all end the same way for the user
        raise AnalysisError(f"Could not fetch {repo_id!r} from the Hugging Face hub ({type(exc).__name__}); "
                            "the machine may be offline: use a bundled sample or a local directory.") from None


def read_config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise AnalysisError(f"{path / 'config.json'} cannot be read as JSON ({exc}); "
                            "re-save the model with save_pretrained.") from None


def _validate_directory(path: Path) -> None:
    if not path.is_dir():
        raise AnalysisError(f"{path} is not a directory; pass a folder written by save_pretrained.")
    if not (path / "config.json").exists():
        raise AnalysisError(f"{path} has no config.json, so it is not a Hugging Face model directory; "
                            "pass a folder written by save_pretrained.")
    model_type = read_config(path).get("model_type")
    if model_type not in SUPPORTED_TYPES:
        raise AnalysisError(f"Architecture {model_type!r} in {path} is not supported; supported: "
                            f"{', '.join(SUPPORTED_TYPES)}.")
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        extra = " (only PyTorch .bin weights found; convert them to safetensors)" if list(path.glob("*.bin")) else ""
        raise AnalysisError(f"{path} has no .safetensors weights{extra}; only safetensors checkpoints are loaded.")
    for file in weights:
        _check_safetensors(file)


def _check_safetensors(file: Path) -> None:
    """Reject corrupt or truncated files up front with a clear sentence instead of a deep traceback."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as fh:
            header_len = int.from_bytes(fh.read(8), "little")
            if header_len <= 0 or 8 + header_len > size:
                raise ValueError("header length does not fit the file")
            header = json.loads(fh.read(header_len))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        if 8 + header_len + end != size:
            raise ValueError(f"tensor data ends at byte {8 + header_len + end} but the file has {size}")
    except (ValueError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{file} is corrupt or truncated ({exc}); re-save or re-download the model.") from None


def load_model(source: str, device: str = "auto", dtype=None):
    """Load a supported fla causal LM for inference: eval mode, on the chosen device and dtype.

    On CPU the project's torch path runs the model; on CUDA fla's Triton kernels do. Only safetensors
    weights are read and remote code is never trusted.
    """
    import analysis  # noqa: F401  (installs the CPU path and registers the pruned model types)
    from transformers import AutoModelForCausalLM

    path = resolve_source(source)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, use_safetensors=True,
                                                     trust_remote_code=False)
    except Exception as exc:
        raise AnalysisError(f"Loading {path} failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                            "check that the weights match config.json.") from None
    model = model.to(dev).eval()
    model.analysis_source = str(path)
    model.analysis_name = Path(source).name if (SAMPLES_DIR / str(source)).exists() else str(source)
    return model


def load_tokenizer(source_or_model):
    """The tokenizer saved beside the model, else the bundled one (the samples are trained with it)."""
    from analysis import data
    path = Path(getattr(source_or_model, "analysis_source", source_or_model))
    if (path / "tokenizer.json").exists():
        return data.load_tokenizer(path)
    return data.load_tokenizer()


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

    def as_dict(self) -> dict:
        return asdict(self)


def attention_layers(model) -> list:
    return [block.attn for block in model.model.layers]


def describe(model) -> ArchitectureInfo:
    """Architecture summary read from the modules themselves (so per-layer key dims are exact)."""
    attns = attention_layers(model)
    value_heads = [getattr(a, "num_v_heads", a.num_heads) for a in attns]
    dks = [a.head_k_dim for a in attns]
    state = sum(hv * dk * a.head_v_dim * 4 for a, hv, dk in zip(attns, value_heads, dks))
    param = next(model.parameters())
    conv = sum(m.weight.shape[0] * m.weight.shape[-1] * param.element_size()
               for a in attns for m in (getattr(a, n, None) for n in ("q_conv1d", "k_conv1d", "v_conv1d"))
               if m is not None)
    model_type = model.config.model_type
    return ArchitectureInfo(
        model_type=model_type, label=SUPPORTED_TYPES.get(model_type, model_type), layers=len(attns),
        heads=attns[0].num_heads, value_heads=value_heads[0], head_k_dims=dks, head_v_dim=attns[0].head_v_dim,
        hidden_size=model.config.hidden_size, vocab_size=model.config.vocab_size,
        parameters=sum(p.numel() for p in model.parameters()), state_bytes_per_sequence=state,
        conv_state_bytes_per_sequence=conv, key_tiles_per_head=[-(-dk // TILE_ROWS) for dk in dks],
        device=str(param.device), dtype=str(param.dtype).replace("torch.", ""))
