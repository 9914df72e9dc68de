"""transformers' Mamba-2 mixers: `mamba2`, `nemotron_h`, `granitemoehybrid`, `falcon_h1`, `bamba`, `zamba2`
(and their pruned_ types).

Mamba-2's SSD is linear attention with a scalar decay per head (no delta rule, no l2 norm, no dk^-1/2 scale):
    S_t = e^{A·dt_t} S_{t−1} + dt_t · B_t x_tᵀ   (K-first [N, head_dim]),   y_t = S_tᵀ C_t + D·x_t,
so C is the query, B the key, dt·x the value, A·dt the log-decay, dk = N (the state size). B and C have
`n_groups` heads, each shared by heads/n_groups value heads, as a key head serves several value heads in GDN.

Every mixer (Mamba2Mixer, NemotronHMamba2Mixer, GraniteMoeHybridMambaLayer, FalconH1Mixer, BambaMixer,
Zamba2MambaMixer) has the same layout: `in_proj` rows [z (I) | x (I) | B (G·N) | C (G·N) | dt (heads)], one depthwise
`conv1d` (with bias) over x|B|C, SiLU. Pruning N keeps the same channels of B and C per group: those rows of
`in_proj` and of the conv's weight and bias; Falcon-H1's `mup_vector` is a per-section constant rebuilt from the
config. Removing a channel is pure channel removal (there is no readout scale to keep).

Blocks, in order: each decoder layer's token mixers among `mixer` (Mamba-2, Nemotron-H), `mamba` and `self_attn`
(Granite-H, Bamba, Falcon-H1, whose layers hold both side by side: two blocks per layer); a Zamba2 hybrid layer
lists its shared transformer's attention, then its own Mamba-2 mixer (the shared block appears once per hybrid
layer, as it keeps one KV cache per hybrid layer). Mamba-2 mixers are "linear", q/k/v attention "softmax", the rest
(Nemotron-H's MLP and MoE layers) "other"; only linear ones are pruned. Mamba-1 models (`mamba`, `jamba`,
`falcon_mamba`) are refused in one sentence (`refused_types`).
"""
from __future__ import annotations

import copy

import torch

from analysis.archs.base import (PRUNED_PREFIX, Adapter, Block, ChannelRows, FamilySpec, HeadRows, LayerSizes,
                                 head_blocks, is_pruned_type)
from analysis.archs.heads import head_config_fields
from analysis.archs.mamba2.layout import (HEAD_GROUP_KEYS, STATE_SIZE_KEYS, feed_forward_words, kind, layers_of,
                                         mixers_in)
from analysis.archs.mamba2.routing import ENTRY_POINT, KERNEL
from analysis.errors import AnalysisError

MAMBA1 = ("is a Mamba-1 model: its selective scan keeps a diagonal state per channel, with no per-head B/C split "
          "into query/key channels, so it has no key dimension to measure or prune")


SPEC = FamilySpec(
    family="mamba2", label="Mamba-2 hybrids (Mamba-2 SSD + attention)", own_types=tuple(STATE_SIZE_KEYS),
    kernel=KERNEL, entry_points=(ENTRY_POINT,),   # what mamba2/routing.py routes
    sizes=LayerSizes(key_heads="n_groups", value_heads="num_heads", key_dim="ssm_state_size", value_dim="head_dim"),
    refused_types=tuple((t, MAMBA1) for t in ("mamba", "jamba", "falcon_mamba")),
    lora_projections=("in_proj",),  # x|B|C|z|dt in one projection: B and C are the key/query rows
    key_dims_config_key="ssm_state_sizes",
    readout_scaled=False,       # y = C_tᵀ S_t: removing a channel needs no readout correction
    qk_l2_normalised=False,     # B and C enter the scan raw: the noise page's re-normalised bounds do not apply
    recurrence_inputs=("Mamba-2's SSD scan, one decay per head: q = C, k = B, v = dt·x and log-decay g = A·dt per "
                       "token; no delta rule (no β, nothing is erased before a write), B and C enter the scan "
                       "without normalisation, and the readout y = Cᵀ S has no scale"),
    rotations=True,             # one decay per head: a rotation of a group's B/C channels commutes with it
    training_model_types=("nemotron_h", "granitemoehybrid"), training_options=("state_size",))


class Mamba2Adapter(Adapter):
    # --- structure -------------------------------------------------------------------------------
    def blocks(self, model) -> list[Block]:
        out = []
        for module in (m for layer in layers_of(model) for m in mixers_in(layer)):
            out.append(Block(len(out), kind(module), module))
        for block in out:
            if block.kind == "linear" and block.module.num_heads % block.module.n_groups:
                m = block.module
                raise AnalysisError(f"This model's Mamba-2 layers have {m.num_heads} heads in {m.n_groups} groups; "
                                    "the groups must divide the heads evenly (each group's B and C serve the same "
                                    "number of heads), so fix n_groups in config.json.")
        return out

    def decoder_layers(self, model):
        return layers_of(model)

    def block_labels(self, model) -> list[str]:
        """Mamba-2 mixer / softmax attention / Nemotron-H's MLP or MoE blocks; where a decoder layer holds its own
        feed-forward next to the mixer (Granite-H, Bamba, Falcon-H1), the label names it too (never pruned)."""
        words = {"linear": "Mamba-2 SSD mixer", "softmax": "softmax attention"}
        out = []
        for layer in layers_of(model):
            ff = feed_forward_words(layer)
            for module in mixers_in(layer):
                text = words.get(kind(module)) or feed_forward_words(module, alone=True) or "other mixer"
                out.append(f"{text} + {ff}" if ff else text)
        return out

    def config_refusal(self, config: dict, where: str) -> str | None:
        """Groups that do not divide the heads (each group's B and C serve heads / groups heads), before loading:
        transformers' own scan cannot run them either (docs/config-flags.md, "Config flags of the transformers
        families")."""
        keys = HEAD_GROUP_KEYS.get(str(config.get("model_type", "")).removeprefix(PRUNED_PREFIX))
        heads, groups = (config.get(k) for k in keys) if keys else (None, None)
        if isinstance(heads, int) and isinstance(groups, int) and groups > 0 and heads % groups:
            return (f"{where} sets {keys[1]} to {groups}, which does not divide the {heads} Mamba-2 heads "
                    f"({keys[0]}), and each group's B and C serve the same number of heads, so fix {keys[1]}.")
        return None

    def complete_config(self, config: dict) -> dict:
        """Nemotron-H saves its block pattern (`layers_block_type`) instead of num_hidden_layers."""
        pattern = config.get("layers_block_type") or config.get("hybrid_override_pattern")
        if config.get("num_hidden_layers") is None and isinstance(pattern, (list, str)) and pattern:
            return {**config, "num_hidden_layers": len(pattern)}
        return config

    def channel_rows(self, layer) -> list[ChannelRows]:
        """C (query) and B (key) rows of in_proj, then of the conv's weight and bias (conv channels are x|B|C)."""
        inner, groups = layer.intermediate_size, layer.n_groups * layer.ssm_state_size
        z = layer.in_proj.weight.shape[0] - layer.conv_dim - layer.num_heads   # z, plus any extra MLP rows before it
        rows = [ChannelRows("in_proj.weight", "q", z + inner + groups), ChannelRows("in_proj.weight", "k", z + inner)]
        if layer.in_proj.bias is not None:
            rows += [ChannelRows("in_proj.bias", "q", z + inner + groups), ChannelRows("in_proj.bias", "k", z + inner)]
        rows += [ChannelRows("conv1d.weight", "q", inner + groups, conv=True),
                 ChannelRows("conv1d.weight", "k", inner, conv=True)]
        if layer.conv1d.bias is not None:
            rows += [ChannelRows("conv1d.bias", "q", inner + groups, conv=True),
                     ChannelRows("conv1d.bias", "k", inner, conv=True)]
        return rows

    def head_rows(self, layer) -> list[HeadRows]:
        """A Mamba-2 head is a value head of its group (the group's B and C are the key head). Per head: its z
        (gate) and x rows of in_proj, its x conv channels, its dt row, dt_bias, A_log, D, its slice of the gated
        norm's weight and out_proj's input columns; per group: its B and C rows and conv channels."""
        heads, groups, p, n, inner = layer.num_heads, layer.n_groups, layer.head_dim, layer.ssm_state_size, \
            layer.intermediate_size
        x = layer.in_proj.weight.shape[0] - layer.conv_dim - heads    # x|B|C start (after z and any extra rows)

        def sections(param: str, at: int, with_z: bool) -> list[HeadRows]:
            out = [head_blocks(param, "value", heads, p, at - inner)] if with_z else []
            return out + [head_blocks(param, "value", heads, p, at), head_blocks(param, "key", groups, n, at + inner),
                          head_blocks(param, "key", groups, n, at + inner + groups * n)]
        rows = sections("in_proj.weight", x, True) + [head_blocks("in_proj.weight", "value", heads, 1, x + layer.conv_dim)]
        if layer.in_proj.bias is not None:
            rows += [HeadRows("in_proj.bias", r.role, r.starts, r.width) for r in rows]
        rows += sections("conv1d.weight", 0, False)
        if layer.conv1d.bias is not None:
            rows += sections("conv1d.bias", 0, False)
        rows += [head_blocks(name, "value", heads, 1) for name in ("dt_bias", "A_log", "D")]
        if self.grouped_norm_weight(layer):
            rows.append(head_blocks("norm.weight", "value", heads, p))
        return rows + [head_blocks("out_proj.weight", "value", heads, p, dim=1)]

    def set_head_counts(self, layer, key_heads: int, value_heads: int, original) -> None:
        """Sizes of the mixer, its conv and its grouped norm; the norm's eps keeps the original group width in its
        mean (analysis.archs.heads: pure removal)."""
        layer.num_heads, layer.n_groups = value_heads, key_heads
        layer.intermediate_size = value_heads * layer.head_dim
        layer.conv_dim = layer.intermediate_size + 2 * key_heads * layer.ssm_state_size
        if hasattr(layer, "groups_time_state_size"):   # Falcon-H1
            layer.groups_time_state_size = key_heads * layer.ssm_state_size
        if self.grouped_norm_weight(layer):
            norm = layer.norm
            if hasattr(norm, "group_size"):
                norm.group_size = layer.intermediate_size // key_heads
            else:                                      # Falcon-H1's norm counts groups instead
                norm.n_groups = key_heads
            norm.variance_epsilon *= (original[1] / original[0]) / (value_heads / key_heads)

    def head_output(self, layer):
        """The gated norm's input (it averages over a group's heads), or out_proj's where there is no norm."""
        return layer.norm if self.grouped_norm_weight(layer) else layer.out_proj

    def grouped_norm_weight(self, layer) -> str | None:
        norm = getattr(layer, "norm", None)
        return "norm.weight" if isinstance(getattr(norm, "weight", None), torch.nn.Parameter) else None

    def softmax_cache_bytes(self, module, tokens, dtype_bytes):
        kv_heads = getattr(module, "num_key_value_heads", None) or module.config.num_key_value_heads
        return 2 * kv_heads * module.head_dim * tokens * dtype_bytes

    # --- pruning ---------------------------------------------------------------------------------
    def pruned_model(self, model, key_dims, readout_key_dims, head_counts=None):
        """Uniform N: the family's own type (its config holds N); per-layer N: the registered pruned_<type>.
        readout_key_dims is ignored: Mamba-2 reads out C_tᵀ S_t with no key-dim scale."""
        from analysis.archs.mamba2.pruned import PRUNED_TYPES, register
        register()
        layers = self.linear_layers(model)
        dims = [int(d) for d in key_dims]
        if len(dims) != len(layers):
            raise AnalysisError(f"Got {len(dims)} state sizes for {len(layers)} Mamba-2 layers; give one per layer.")
        config = copy.deepcopy(model.config)
        base = config.model_type.removeprefix(PRUNED_PREFIX)
        heads = head_config_fields(model, self, head_counts)
        if len(set(dims)) == 1 and not heads and not is_pruned_type(config.model_type):
            setattr(config, STATE_SIZE_KEYS[base], dims[0])   # plain transformers loads it
            cls = type(model)
        else:
            if base not in PRUNED_TYPES:
                raise AnalysisError(f"Per-layer state sizes for {base!r} models need a transformers version with that "
                                    "model type; prune with one ratio for every layer instead.")
            cfg_cls, cls = PRUNED_TYPES[base]
            values = {k: v for k, v in config.to_dict().items() if k not in ("model_type", self.key_dims_config_key)}
            config = cfg_cls(**values)
            setattr(config, STATE_SIZE_KEYS[base], max(dims))
            setattr(config, self.key_dims_config_key, dims)
            for key, value in heads.items():
                setattr(config, key, value)
            config.architectures = [cls.__name__]
        param = next(model.parameters())
        with torch.device(param.device):
            pruned = cls(config)
        return pruned.to(param.dtype).eval()

    # --- training --------------------------------------------------------------------------------
    def training_config(self, cfg, vocab_size: int):
        """A Mamba-2 hybrid with `layers` mixers, every `full_attention_interval`-th one softmax attention, each
        followed by an MLP; `heads` Mamba-2 heads of `head_dim` channels, N = `state_size` (default head_dim),
        `key_heads` groups (default heads // 2).
        - nemotron_h (default): transformers' Nemotron-H, mixers and MLPs as separate blocks ("M-M-M-*-"), as the
          real models interleave them; its LM head is never tied to the embedding.
        - granitemoehybrid: Granite 4.0-H-Micro's layout: each layer one mixer plus a dense gated MLP
          (`num_local_experts` 0), no position embedding, tied embeddings (a smaller file at the same width)."""
        groups = cfg.key_heads or max(1, cfg.heads // 2)
        if cfg.heads % groups:
            raise AnalysisError(f"--heads ({cfg.heads}) must be a multiple of --key-heads ({groups}): each group's B "
                                "and C serve the same number of Mamba-2 heads.")
        every, state = cfg.full_attention_interval, cfg.state_size or cfg.head_dim
        attention = [(i + 1) % every == 0 for i in range(cfg.layers)]
        mlp = cfg.intermediate_size or 2 * cfg.hidden_size
        ids = dict(vocab_size=vocab_size, hidden_size=cfg.hidden_size, max_position_embeddings=cfg.seq_len,
                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
        if (cfg.model_type or "nemotron_h") == "granitemoehybrid":
            from transformers.models.granitemoehybrid import GraniteMoeHybridConfig
            if cfg.heads * cfg.head_dim % cfg.hidden_size:
                raise AnalysisError(f"Granite-H needs --heads × --head-dim ({cfg.heads * cfg.head_dim}) to be a multiple "
                                    f"of --hidden-size ({cfg.hidden_size}): the mixer's width is expand × hidden.")
            attention_heads = max(1, cfg.hidden_size // cfg.head_dim)
            return GraniteMoeHybridConfig(
                **ids, num_hidden_layers=cfg.layers, layer_types=["attention" if a else "mamba" for a in attention],
                mamba_n_heads=cfg.heads, mamba_d_head=cfg.head_dim, mamba_d_state=state, mamba_n_groups=groups,
                mamba_expand=cfg.heads * cfg.head_dim // cfg.hidden_size, mamba_chunk_size=64,
                num_attention_heads=attention_heads, num_key_value_heads=max(1, attention_heads // 2),
                num_local_experts=0, shared_intermediate_size=mlp, intermediate_size=mlp,
                position_embedding_type=None, tie_word_embeddings=True)
        from transformers.models.nemotron_h import NemotronHConfig
        pattern = "".join(("*" if a else "M") + "-" for a in attention)
        return NemotronHConfig(
            **ids, hybrid_override_pattern=pattern, intermediate_size=mlp, mamba_num_heads=cfg.heads,
            mamba_head_dim=cfg.head_dim, ssm_state_size=state, n_groups=groups, num_attention_heads=groups,
            num_key_value_heads=max(1, groups // 2), head_dim=cfg.head_dim, tie_word_embeddings=False)

    # --- devices ---------------------------------------------------------------------------------
    def shipped_parts(self, model):
        """Falcon-H1's per-layer multipliers travel with a saved prune's modeling file (mamba2.pruned)."""
        from analysis.archs.mamba2.pruned import shipped_parts
        return shipped_parts(model)

    def install_routing(self) -> None:
        """Route the SSD scan by device, register pruned_<type>, and give `mamba2` back to transformers: fla
        registers its own Mamba2 (Triton-only norms and conv) under the same model type when imported."""
        from analysis.archs.mamba2 import pruned, routing
        routing.install()
        reclaim_mamba2_type()
        pruned.register()


def reclaim_mamba2_type() -> None:
    """Map model type `mamba2` to transformers' classes again (fla's `import fla` maps it to fla's own)."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    from transformers.models.mamba2 import Mamba2Config, Mamba2ForCausalLM, Mamba2Model
    AutoConfig.register("mamba2", Mamba2Config, exist_ok=True)
    AutoModel.register(Mamba2Config, Mamba2Model, exist_ok=True)
    AutoModelForCausalLM.register(Mamba2Config, Mamba2ForCausalLM, exist_ok=True)


ADAPTER = Mamba2Adapter(SPEC)
