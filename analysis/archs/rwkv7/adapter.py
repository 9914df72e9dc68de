"""fla RWKV-7 (`rwkv7`; pruned `pruned_rwkv7`): the diagonal-plus-low-rank generalised delta rule.

Per head, K-first state S ∈ R^{dk×dv} (fla/layers/rwkv7.py, chunk_rwkv7 → chunk_dplr_delta_rule):
    S_t = (Diag(e^{w_t}) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ,   o_t = S_tᵀ r_t          (no readout scale)
i.e. fla's V-first reading Sᵀ_t = Sᵀ_{t−1}(Diag(e^{w_t}) + a_t b_tᵀ) + v_t k_tᵀ, with, from the token-shifted
input mixes x_r, x_w, x_k, x_a (x_* = x + δ·x_*, δ_t = x_{t−1} − x_t):
    r = r_proj x_r,  w = −e^{-1/2}·sigmoid(w_lora x_w) (log-decay, one per key channel),
    α = sigmoid(a_lora x_a),  κ̂ = l2norm(k_proj x_k ⊙ k_k) per head,  k = k_proj x_k ⊙ (1 + (α − 1) ⊙ k_a),
    a = −κ̂,  b = κ̂ ⊙ α,
then a GroupNorm over each head's output and the gate/bonus term (o + (Σ_c r_c k_c r_k,c) v) ⊙ g_lora(x_g).

A key channel (channel c of head h) is a row of r_proj, k_proj, the decay LoRA's output (w_lora.lora.2), the
in-context-rate LoRA's output (a_lora.lora.2), and the per-channel k_k, k_a, r_k[h, c]: pruning removes them all
together and leaves the rest of the block untouched. With r_c = k_c = 0 the channel's κ̂_c and b_c are 0 and κ̂
keeps its norm over the other channels, so its state row stays 0, no other row reads it, and the bonus term loses
exactly r_c k_c r_k,c = 0: pure channel removal. PCA is refused (each channel decays at its own rate).

CPU routing: besides the recurrence (project's `chunked_dplr_delta_rule`), RWKV-7 calls fla Triton helpers that
have no CPU path (token shift, the fused x_* mixes, the k update, l2norm, the gate/bonus term) and a squared ReLU
that torch.compile's; CPU tensors take fla's own torch references of them (a token shift with a cache and the
plain squared ReLU written here). fla's Triton bonus-term kernel
assumes r/k and v heads of one width (it indexes v with r's head dim), so a pruned layer (dk′ < dv) takes the
torch reference on CUDA too.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from analysis.archs.base import Adapter, Block, ChannelRows, FamilySpec, LayerSizes, classify_blocks
from analysis.archs.fla_shared.adapter import FlaAdapter, fla_config_refusal
from analysis.errors import AnalysisError

LAYER_FILE, MODEL_FILE = "fla.layers.rwkv7", "fla.models.rwkv7.modeling_rwkv7"


def token_shift(x, cu_seqlens=None, cache=None, output_cache=False, chunk_indices=None):
    """fla's token_shift in torch: δ_t = x_{t−1} − x_t (x_{−1} = the cache [N, D], else 0); the new cache is each
    sequence's last x."""
    if cu_seqlens is None:
        first = torch.zeros_like(x[:, :1]) if cache is None else cache.reshape(x.shape[0], 1, -1).to(x.dtype)
        prev, last = torch.cat([first, x[:, :-1]], dim=1), x[:, -1]
    else:
        bounds = cu_seqlens.tolist()
        prev, last = torch.zeros_like(x), []
        for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:])):
            if cache is not None:
                prev[0, s] = cache[n]
            prev[0, s + 1:e] = x[0, s:e - 1]
            last.append(x[0, e - 1])
        last = torch.stack(last)
    delta = prev - x
    return (delta, last) if output_cache else delta


def _sqrelu(x):
    """relu(x)², fp32 inside: the body of fla's torch.compile'd sqrelu_fwd (compiling it costs seconds per shape on
    a CPU, for an op of microseconds)."""
    return torch.relu(x.float()).square().to(x.dtype)


def _sqrelu_grad(g, x):
    return (2.0 * g * torch.relu(x.float())).to(x.dtype)


def _k_update(k, a, ka, cu_seqlens=None, cu_seqlens_cpu=None):
    from fla.ops.rwkv7.fused_k_update import k_update_ref
    return k_update_ref(k, a, ka)


def bonus_by_shape(fla_fn):
    """The gate/bonus term: fla's Triton kernel only on CUDA with r/k heads as wide as v's (see the module doc)."""
    from fla.ops.rwkv7.gate_output_correction import gate_output_correction_ref

    def gate_output_correction(o, r, k, r_k, v, g):
        if o.is_cuda and r.shape[-1] == v.shape[-1]:
            return fla_fn(o, r, k, r_k, v, g)
        return gate_output_correction_ref(o, r, k, r_k, v, g)
    gate_output_correction.__wrapped__ = fla_fn
    gate_output_correction.routes_by_shape = True
    return gate_output_correction


GUARD_SOURCE = f"""

def guard_bonus_term():
    \"\"\"fla's Triton bonus-term kernel indexes v with r's head width, which is wrong once a layer's key dim is
    smaller than its value dim: fla's layer file calls it through a module global, which takes fla's torch
    reference for such calls (and fla's kernel for every call it handles rightly). Idempotent.\"\"\"
    import importlib
    layer_file = importlib.import_module("{LAYER_FILE}")
    if not getattr(layer_file.gate_output_correction, "routes_by_shape", False):   # fla's own sets __wrapped__
        layer_file.gate_output_correction = bonus_by_shape(layer_file.gate_output_correction)
"""


SPEC = FamilySpec(
    family="rwkv7", label="RWKV-7", own_types=("rwkv7",), kernel="rwkv7",
    entry_points=("chunk_rwkv7", "fused_mul_recurrent_rwkv7"),   # fla/layers/rwkv7.py
    sizes=LayerSizes(key_heads="num_heads", value_heads="num_heads", key_dim="head_dim", value_dim="head_v_dim"),
    lora_projections=("r_proj", "k_proj", "v_proj"),
    rotations=False,            # one decay per key channel
    qk_l2_normalised=False,     # r and k enter the recurrence raw (only the removal key κ̂ is normalised)
    readout_scaled=False,       # o_t = S_tᵀ r_t: removing a channel needs no readout correction
    head_refusal=("RWKV-7 layers mix every layer's values with the first layer's (v_first, one width for all "
                  "layers), so its heads cannot be removed layer by layer; shrink the key dim instead (--ratio)."))


class RWKV7Adapter(Adapter):
    def config_refusal(self, config: dict, where: str) -> str | None:
        """fla 0.6 runs neither an RWKV-7 hybrid nor a value width other than hidden_size (docs/config-flags.md)."""
        from analysis.archs.fla_shared.adapter import softmax_layer_indices
        if softmax_layer_indices(config):
            return (f"{where} sets attn (softmax attention in layers {sorted(softmax_layer_indices(config))}), which "
                    "fla 0.6's RWKV-7 blocks cannot run (they take four outputs from every token mixer, fla's "
                    "Attention gives three); the tool reads RWKV-7 models without attn only.")
        hidden, widths = config.get("hidden_size"), config.get("value_dim")
        if widths is not None and any(w != hidden for w in (widths if isinstance(widths, list) else [widths])):
            return (f"{where} sets value_dim to {widths!r}, not hidden_size ({hidden}); fla 0.6 cannot build such an "
                    "RWKV-7 model (its value LoRA is initialised at hidden_size), so the tool cannot load it either.")
        return fla_config_refusal(config, where)

    # --- structure -------------------------------------------------------------------------------
    def blocks(self, model) -> list[Block]:
        from fla.layers.attn import Attention
        from fla.layers.rwkv7 import RWKV7Attention
        return classify_blocks([b.attn for b in model.model.layers], ((RWKV7Attention, "linear"), (Attention, "softmax")))

    def channel_rows(self, layer: nn.Module) -> list[ChannelRows]:
        """r (query) and k rows, then every per-key-channel parameter of the transition (module doc)."""
        rows = [ChannelRows("r_proj.weight", "q"), ChannelRows("k_proj.weight", "k")]
        for lora in ("w_lora", "a_lora"):
            rows.append(ChannelRows(f"{lora}.lora.2.weight", "gate"))
            if getattr(layer, lora).lora[2].bias is not None:
                rows.append(ChannelRows(f"{lora}.lora.2.bias", "gate"))
        return rows + [ChannelRows("k_k", "gate"), ChannelRows("k_a", "gate"), ChannelRows("r_k", "gate", heads_first=True)]

    softmax_cache_bytes = FlaAdapter.softmax_cache_bytes   # fla's Attention, as in the fla hybrids

    # --- pruning ---------------------------------------------------------------------------------
    def pruned_model(self, model, key_dims: list[int], readout_key_dims: list[int] | None, head_counts=None):
        """Always `pruned_rwkv7` (RWKV7Config ties the key dim to hidden_size); readout_key_dims is ignored: there
        is no readout scale; heads are never removed (head_refusal)."""
        if head_counts is not None:
            raise AnalysisError(self.head_refusal)
        from transformers import AutoModelForCausalLM

        from analysis.archs.rwkv7.pruned import PrunedRWKV7Config
        dims = [int(d) for d in key_dims]
        layers = self.linear_layers(model)
        if len(dims) != len(layers):
            raise AnalysisError(f"Got {len(dims)} key dims for a model with {len(layers)} RWKV-7 layers; "
                                "give one per RWKV-7 layer.")
        self.check_key_dims(dims)
        base = {k: v for k, v in model.config.to_dict().items() if k not in ("model_type", "architectures", "head_k_dims")}
        param = next(model.parameters())
        return AutoModelForCausalLM.from_config(PrunedRWKV7Config(**base, head_k_dims=dims)).to(
            device=param.device, dtype=param.dtype).eval()

    # --- devices ---------------------------------------------------------------------------------
    def shipped_parts(self, model):
        """A saved prune's modeling file routes the bonus term by shape, as the project does (module doc)."""
        import inspect

        from analysis.archs.shipped_code import ShippedParts
        return ShippedParts(source=inspect.getsource(bonus_by_shape) + GUARD_SOURCE, after_init="guard_bonus_term()")

    def install_routing(self) -> None:
        """The recurrence and RWKV-7's Triton helpers, as fla's layer and model files look them up, by device."""
        import importlib

        from fla.ops.rwkv7.fused_addcmul import torch_addcmul_rwkv7

        from analysis.archs.rwkv7 import pruned  # noqa: F401  (registers pruned_rwkv7 with transformers)
        from analysis.archs.fla_shared.adapter import install_fla_routing
        from analysis.runtime import backend
        install_fla_routing()   # fla's shared modules (LayerNorm, GroupNorm, cross-entropy) and softmax attention
        layer_file, model_file = (importlib.import_module(m) for m in (LAYER_FILE, MODEL_FILE))
        backend.route_recurrence(layer_file, self.entry_points, self.kernel_spec.recurrence)
        for module in (layer_file, model_file):
            backend.route(module, ("token_shift",), wrap=backend.torch_on_cpu(token_shift))
        # (its l2_norm goes through fla's dispatch of l2norm_fwd/l2norm_bwd: analysis.runtime.fla_dispatch)
        for name, torch_fn in (("fused_addcmul_rwkv7", torch_addcmul_rwkv7), ("fused_k_rwkv7", _k_update)):
            backend.route(layer_file, (name,), wrap=backend.torch_on_cpu(torch_fn))
        backend.route(layer_file, ("gate_output_correction",), wrap=bonus_by_shape)
        activations = importlib.import_module("fla.modules.activations.ops")   # the feed-forward's squared ReLU
        for name, torch_fn in (("sqrelu_fwd", _sqrelu), ("sqrelu_bwd", _sqrelu_grad)):
            backend.route(activations, (name,), wrap=backend.torch_on_cpu(torch_fn))


ADAPTER = RWKV7Adapter(SPEC)
