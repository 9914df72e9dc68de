"""What the core needs to know about one family of linear-attention models: the adapter interface.

Everything family-specific (module and parameter names, head grouping, its kernel, fused projections, how a
config says its key dim, which kernel to time, which kernel entry points to route to CPU) lives in one
adapter per family under `analysis/archs/`. The core (states, calibration, strategies, prune, measure,
sweep, CLI, pages) asks the adapter and nothing else.

Conventions shared by every family:
- a *linear layer* is the token-mixing module of one block that keeps a matrix-valued state; the
  adapter lists every block in order (`blocks`), labelling softmax-attention blocks of hybrids;
- q/k channels are head-major: row `h·dk + i` of a query/key projection (or of its slice in a fused
  projection) is channel i of key head h; `ChannelRows` says where those rows are;
- key heads Hk ≤ value heads Hv, Hv a multiple of Hk: key head h serves value heads h·Hv/Hk … (h+1)·Hv/Hk − 1
  (grouped value attention); states are per value head, K-first [dk, dv];
- the recurrence inputs the layer hands to its kernel are observed through `analysis.runtime.backend`
  (RecurrenceInputs), whatever the device; the adapter routes its family's kernel entry points there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from analysis.errors import AnalysisError

if TYPE_CHECKING:  # annotations only: the registry and the kernel specs import no torch (fast `--help`)
    import torch.nn as nn

KINDS = ("linear", "softmax", "other")
BLOCK_WORDS = {"linear": "linear attention", "softmax": "softmax attention", "other": "other mixer"}
PRUNED_PREFIX = "pruned_"   # every family saves a per-layer prune as the registered type pruned_<its own type>


def pruned_type(model_type: str) -> str:
    """The project's registered per-layer pruned type of a family's own model type."""
    return PRUNED_PREFIX + model_type


def is_pruned_type(model_type: str) -> bool:
    return model_type.startswith(PRUNED_PREFIX)


def file_stem(model_type: str) -> str:
    """A model type as part of a Python file name (a saved prune's configuration_/modeling_ files)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in model_type)


def how_to_load(model_type: str) -> str:
    """One sentence for whoever opens a `pruned_*` folder: the two ways it loads (its model card says the same)."""
    return (f"{model_type!r} is a model type of the state-rank dashboard (a prune with per-layer sizes): load the "
            "folder with AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, use_safetensors=True) when it carries its "
            f"modeling_{file_stem(model_type)}.py (a folder saved before that gets it with `python -m analysis "
            "export FOLDER --out NEW`), or with the dashboard installed after `import analysis; analysis.ready()`.")


@dataclass(frozen=True)
class Block:
    """One block of the model, in order: its token mixer and what kind it is."""
    index: int            # position in the model's block list
    kind: str             # one of KINDS
    module: nn.Module     # the token-mixing module (linear attention, softmax attention, ...)


def classify_blocks(mixers: list[nn.Module], kinds: tuple[tuple[type, str], ...]) -> list[Block]:
    """Blocks for each block's token mixer, in order: the kind of the first class it is an instance of, else "other"."""
    return [Block(i, next((kind for cls, kind in kinds if isinstance(m, cls)), "other"), m)
            for i, m in enumerate(mixers)]


@dataclass(frozen=True)
class ChannelRows:
    """Rows (dim 0) of one parameter of a linear layer that hold Hk·dk query/key channels, head-major.

    Pruning keeps the same channels in every ChannelRows of a layer (q, k and, for per-channel gates, the
    decay channels), so q·k over the kept channels is unchanged and each kept key channel keeps its decay.
    Role "gate" rows are per value head (Hv·dk rows, head-major): value head j follows key head j // (Hv/Hk)."""
    param: str            # parameter path inside the layer module, e.g. "q_proj.weight", "in_proj_qkv.weight"
    role: str             # "q", "k" or "gate" (per-key-channel decay rows that must follow the key channels)
    start: int = 0        # first row of the Hk·dk block (non-zero inside fused projections like q|k|v)
    conv: bool = False    # a depthwise short-convolution weight/bias rather than a projection
    head_stride: int = 0  # rows from one key head's block to the next; 0 = heads packed back to back (dk apart).
                          # Non-zero where a fused projection interleaves per key head (Qwen3-Next's q|k|v|z)
    heads_first: bool = False  # the parameter is [heads, dk, ...] (RWKV-7's r_k): its first two dims, flattened,
                               # are the head-major rows


@dataclass(frozen=True)
class HeadRows:
    """Where one parameter of a linear layer holds one block per key head or per value head (head removal).

    `starts[h]` is the first index (along `dim`) of head h's block of `width` entries; a head's blocks go when the
    head goes. Role "key": one block per key head (q/k rows and conv channels, per-key-head decay rows); role
    "value": one block per value head (v rows and conv channels, β and gate rows, per-head decay parameters,
    output-gate rows, the o_proj input columns: dim 1)."""
    param: str            # parameter path inside the layer module, e.g. "v_proj.weight", "o_proj.weight"
    role: str             # "key" or "value"
    starts: tuple         # first index of each head's block, in head order
    width: int            # entries per head
    dim: int = 0          # the dimension the blocks run along (o_proj's input columns: 1)


def head_blocks(param: str, role: str, heads: int, width: int, start: int = 0, dim: int = 0) -> HeadRows:
    """HeadRows for `heads` blocks of `width` packed back to back from `start` (the common layout)."""
    return HeadRows(param, role, tuple(start + h * width for h in range(heads)), width, dim)


@dataclass(frozen=True)
class LayerSizes:
    """Where a linear layer keeps its sizes: for each, the attribute names to read, the first present and not None."""
    key_heads: str | tuple[str, ...]
    value_heads: str | tuple[str, ...]
    key_dim: str | tuple[str, ...]
    value_dim: str | tuple[str, ...]

    def read(self, layer: nn.Module, size: str) -> int:
        names = getattr(self, size)
        for name in (names,) if isinstance(names, str) else names:
            if getattr(layer, name, None) is not None:
                return int(getattr(layer, name))
        raise AttributeError(f"{type(layer).__name__} has none of {names} ({size})")


@dataclass(frozen=True)
class FamilySpec:
    """What one family is, as data: its names, model types, kernel, layer sizes, config fields and flags.

    Each archs/<family>/adapter.py starts with its SPEC; its Adapter adds only the behaviour that differs. The
    adapter reads as its spec (`adapter.kernel` is `adapter.spec.kernel`)."""
    family: str                          # registry key, e.g. "delta_net"
    label: str                           # human label, e.g. "DeltaNet"
    own_types: tuple[str, ...]           # the config.model_type values of the family itself (declared here only)
    kernel: str                          # its kernel (analysis.archs.kernels), e.g. "gated_delta_rule": what `latency`
                                         # times and, through it, the kind of recurrence (kernel_spec.recurrence)
    entry_points: tuple[str, ...]        # recurrence entry points (module globals of the layer's file) it routes
    sizes: LayerSizes                    # the linear layer's attributes holding Hk, Hv, dk, dv
    prunable_types: tuple[str, ...] | None = None  # own types with a pruned_<type> of the project (None: all)
    refused_types: tuple[tuple[str, str], ...] = ()  # types close to the family it cannot handle, and why in words
    rotations: bool = True               # may a strategy keep rotated channels (PCA)? False when gates are per channel
    key_dims_config_key: str = "head_k_dims"   # where a pruned config lists one key dim per linear layer
    qk_l2_normalised: bool = True        # the kernel l2-normalises q and k (False: Mamba-2's B and C enter raw)
    readout_scaled: bool = True          # the readout multiplies by a key-dim factor (dk^-1/2); False: none to keep
    recurrence_inputs: str = ""          # what q, k, v, β, g are, in one sentence, where the generic wording
                                         # (analysis.archs.recurrence_words) would not say it right (Mamba-2's SSD)
    lora_projections: tuple[str, ...] = ()  # linear sub-modules of a linear layer that recovery's LoRA adapts (q/k/v)
    positive_config_fields: tuple[str, ...] = ("num_heads", "head_dim", "conv_size", "num_v_heads")
                                         # the family's config fields that must be whole numbers ≥ 1 when present
    head_refusal: str | None = None      # why this family's heads cannot be removed layer by layer (None: they can)
    training_model_types: tuple[str, ...] = ()  # model types `train --model-type` may pick (first: the default)
    training_options: tuple[str, ...] = ()      # TrainConfig fields only this family reads (e.g. state_size)

    @property
    def pruned_types(self) -> tuple[str, ...]:
        """The project's per-layer pruned types of this family (registered by `install_routing`)."""
        return tuple(pruned_type(t) for t in (self.own_types if self.prunable_types is None else self.prunable_types))

    @property
    def model_types(self) -> tuple[str, ...]:
        """Every config.model_type this family handles: its own and the project's pruned ones."""
        return (*self.own_types, *self.pruned_types)

    @property
    def kernel_spec(self):
        """What this family's GPU kernel accepts (key dims, tile rows, dtypes): analysis.archs.kernels."""
        from analysis.archs.kernels import kernel_spec
        return kernel_spec(self.kernel)

    def refusal(self, model_type) -> str | None:
        """Why a model type close to this family cannot be one, in words; None for any other type."""
        return dict(self.refused_types).get(model_type)


class Adapter:
    """One family: its FamilySpec (data) plus the methods below (behaviour); see archs/<family>/adapter.py."""

    def __init__(self, spec: FamilySpec):
        self.spec = spec

    def __getattr__(self, name: str):
        if name == "spec":   # not set yet (a copy under construction): no spec to read from
            raise AttributeError(name)
        return getattr(self.spec, name)   # the spec's fields read as the adapter's own

    # --- structure -------------------------------------------------------------------------------
    def blocks(self, model) -> list[Block]:
        """Every block in model order, linear and softmax alike."""
        raise NotImplementedError

    def decoder_layers(self, model) -> nn.ModuleList:
        """The model's decoder layers in order: the units a streamed model reads one at a time (each holds one or
        more of the blocks above); the model's own forward calls each exactly once per pass."""
        return model.model.layers

    def mlp_width(self, config) -> int:
        """The MLP's hidden width of a block (for activation-memory estimates)."""
        return int(getattr(config, "intermediate_size", None) or 4 * int(config.hidden_size))

    def block_labels(self, model) -> list[str]:
        """What each block of `blocks(model)` is, in words (the Model page's block list)."""
        return [BLOCK_WORDS[b.kind] for b in self.blocks(model)]

    def linear_layers(self, model) -> list[nn.Module]:
        return [b.module for b in self.blocks(model) if b.kind == "linear"]

    def key_heads(self, layer: nn.Module) -> int:
        return self.spec.sizes.read(layer, "key_heads")

    def value_heads(self, layer: nn.Module) -> int:
        return self.spec.sizes.read(layer, "value_heads")

    def key_dim(self, layer: nn.Module) -> int:
        """dk per key head (the pruned dim where the model was pruned)."""
        return self.spec.sizes.read(layer, "key_dim")

    def value_dim(self, layer: nn.Module) -> int:
        return self.spec.sizes.read(layer, "value_dim")

    def channel_rows(self, layer: nn.Module) -> list[ChannelRows]:
        """Where this layer's q/k (and per-channel gate) rows are; the projections come first, role q then k."""
        raise NotImplementedError

    def softmax_cache_bytes(self, module: nn.Module, tokens: int, dtype_bytes: int) -> int:
        """KV-cache bytes of one softmax-attention block for one sequence of `tokens` tokens."""
        raise NotImplementedError

    def softmax_cache_note(self, module: nn.Module) -> str | None:
        """What a softmax block caches, where it is not plain per-head keys and values (MLA); None: plain K/V."""
        return None

    def complete_config(self, config: dict) -> dict:
        """A config.json dict with the fields the core's checks read filled in where the family's config derives
        them (e.g. num_hidden_layers from a per-layer pattern); unchanged by default."""
        return config

    def config_refusal(self, config: dict, where: str) -> str | None:
        """One sentence naming a config field whose value this family cannot run (`where`: the config file, for the
        sentence), checked before anything is loaded; None when every field is one it runs (docs/config-flags.md)."""
        return None

    def lora_targets(self, layer: nn.Module) -> list[str]:
        """Module paths inside `layer` of the linear projections producing q, k and v (fused or not) that a
        recovery's LoRA adapts, as the reference adapts q_proj/k_proj/v_proj; empty: the family has none."""
        return [name for name in self.lora_projections if hasattr(layer, name)]

    # --- pruning ---------------------------------------------------------------------------------
    def check_key_dims(self, dims, device_type: str = "cpu") -> None:
        """One sentence for a key dim this family's kernel cannot run (on CPU only the maximum applies)."""
        self.kernel_spec.check_key_dims(dims, device_type)

    def pruned_model(self, model, key_dims: list[int], readout_key_dims: list[int] | None, head_counts=None):
        """A NEW model of the same architecture with `key_dims[l]` channels per key head in linear layer l,
        on the model's device and dtype, weights not yet loaded (the core loads the reduced state dict
        strictly). Uniform dims where the family's own config can say them: the family's own type;
        otherwise a registered per-layer type. `readout_key_dims` (None = the family's default dk'^-1/2)
        keeps each layer's readout at that key dim's ^-1/2 (pure channel removal, see fla_shared/pruned.py).
        `head_counts` ([(key heads, value heads)] per linear layer, analysis.archs.heads) removes heads too: a
        head-pruned model is always the registered per-layer type, which keeps its counts in the config."""
        raise NotImplementedError

    def readout_key_dims(self, model) -> list[int]:
        """Per linear layer, the key dim whose ^-1/2 the readout effectively uses (its own dk unless pruned)."""
        kept = getattr(model.config, "readout_key_dims", None) if self.readout_scaled else None
        return [int(d) for d in kept] if kept is not None else [self.key_dim(a) for a in self.linear_layers(model)]

    def shipped_parts(self, model):
        """What a saved pruned folder's modeling file needs beyond resized layers (analysis.archs.shipped_code:
        a ShippedParts), or None when sizes are all."""
        return None

    # --- head removal (analysis.archs.heads; analysis.shrink.heads.prune; spec.head_refusal) ----

    def head_rows(self, layer: nn.Module) -> list[HeadRows]:
        """Every parameter block of this layer that belongs to one key head or one value head: removing a head
        removes exactly these (and nothing else changes shape)."""
        raise NotImplementedError

    def set_head_counts(self, layer: nn.Module, key_heads: int, value_heads: int, original: tuple[int, int]) -> None:
        """Update a freshly built layer's own size attributes (head counts, fused widths) after its head parameters
        were resized to `key_heads` / `value_heads`; `original` (key heads, value heads) is what the unpruned
        layer had, for a norm that averages over a group of value heads (see grouped_norm_weight)."""
        raise NotImplementedError

    def head_output(self, layer: nn.Module) -> nn.Module:
        """The module whose first input holds the layer's value-head outputs, head-major along the last dim, at the
        last point where heads are still separate: zeroing a head's slice there is what removing it means (the
        zeroed-heads reference of the tests). The output projection, unless a norm mixes heads before it."""
        return layer.o_proj

    def grouped_norm_weight(self, layer: nn.Module) -> str | None:
        """The weight of an output norm that averages over all value heads of a group (Mamba-2's grouped gated
        RMSNorm), or None where every norm is per head. Removing heads from such a group is pure removal only if
        the norm keeps its original width in the mean: set_head_counts scales its eps by old/new group width and
        a head prune scales this weight by sqrt(old/new) (analysis.archs.heads says why that is exact)."""
        return None

    # --- training --------------------------------------------------------------------------------

    def check_training_choices(self, cfg) -> None:
        """`train --model-type` / `--state-size` this family cannot build: one sentence before any work."""
        if cfg.model_type is not None and cfg.model_type not in self.training_model_types:
            choices = ", ".join(self.training_model_types) or f"none (--arch {cfg.arch} builds one type)"
            raise AnalysisError(f"--model-type {cfg.model_type} cannot be built for --arch {cfg.arch}; "
                                f"choose from: {choices}.")
        if cfg.state_size is not None and "state_size" not in self.training_options:
            raise AnalysisError(f"--state-size applies to Mamba-2 models only; --arch {cfg.arch} keys have "
                                "--head-dim channels.")

    def training_config(self, cfg, vocab_size: int):
        """A fresh config of this family for `python -m analysis train` (`cfg`: analysis.train.trainer.TrainConfig);
        only families in analysis.archs.TRAINABLE implement it."""
        raise NotImplementedError

    # --- devices ---------------------------------------------------------------------------------
    def install_routing(self) -> None:
        """Patch this family's kernel entry points so CPU tensors take the project's torch ops (and the
        recurrence observer sees their inputs) while CUDA tensors keep the family's kernels. Idempotent."""
