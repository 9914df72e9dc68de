"""Issue 41: every transformers-family config field that changes which modules or code paths run, covered pairwise
(all pairs of values of any two fields appear in some case) by tiny random-init models, every parameter awake.

The fields and their values are read from transformers 5's config classes and modeling files
(transformers/models/<type>/configuration_*.py and modeling_*.py: only fields a module's __init__ or forward reads to
pick a layer, a bias, a kernel size, a norm, a router or a block pattern). Sizes stay those of the family cases
(family_cases/qwen3_5.py, kimi_linear.py, mamba2.py). Imports no `analysis`: the oracle subprocess
(tests/oracle/torch_path_run.py) rebuilds nothing, it loads the saved cases with fla and the project hidden.
"""
from __future__ import annotations

import math

import torch

from family_cases.flags import covering

L, F = "linear_attention", "full_attention"

# --- the tiny base configs (every field a case does not set) ------------------------------------------------------
_QWEN = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
             num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
             linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
             layer_types=[L, L, L, F], tie_word_embeddings=True, max_position_embeddings=256)
_QWEN_MOE = dict(moe_intermediate_size=16, shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=1)
_MAMBA = dict(vocab_size=97, hidden_size=32, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
              tie_word_embeddings=True)

BASE: dict[str, dict] = {
    "qwen3_5_text": _QWEN,
    "qwen3_5_moe_text": {**_QWEN, **_QWEN_MOE},
    "qwen3_next": {**_QWEN, **_QWEN_MOE, "intermediate_size": 32},
    "olmo_hybrid": {**{k: v for k, v in _QWEN.items() if k != "head_dim"}, "pad_token_id": 0, "eos_token_id": 0},
    "kimi_linear": dict(vocab_size=97, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                        num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=16,
                        q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                        num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
                        linear_num_heads=2, linear_head_dim=16, linear_conv_kernel_dim=4,
                        layer_types=[L, L, F, L], mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
                        tie_word_embeddings=True, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2),
    "mamba2": dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, state_size=16, n_groups=2, head_dim=8,
                   num_heads=8, expand=2, conv_kernel=4, chunk_size=8, tie_word_embeddings=True),
    "nemotron_h": {**_MAMBA, "hybrid_override_pattern": "M*M-", "ssm_state_size": 16, "n_groups": 2,
                   "mamba_head_dim": 8, "mamba_num_heads": 8, "head_dim": 16, "chunk_size": 8,
                   "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                   "moe_shared_expert_intermediate_size": 16},
    "granitemoehybrid": {**_MAMBA, "num_hidden_layers": 4, "layer_types": ["mamba", "attention", "mamba", "mamba"],
                         "mamba_d_state": 16, "mamba_n_groups": 2, "mamba_d_head": 8, "mamba_n_heads": 8,
                         "mamba_expand": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                         "shared_intermediate_size": 32, "mamba_chunk_size": 8},
    "falcon_h1": {**_MAMBA, "num_hidden_layers": 2, "mamba_d_state": 16, "mamba_n_groups": 2, "mamba_d_head": 8,
                  "mamba_n_heads": 8, "mamba_d_ssm": 64, "head_dim": 16, "mamba_chunk_size": 8,
                  "ssm_multipliers": [1.0, 0.5, 2.0, 0.25, 1.5], "ssm_in_multiplier": 0.7},
    "bamba": {**_MAMBA, "num_hidden_layers": 3, "attn_layer_indices": [1], "mamba_d_state": 16, "mamba_n_groups": 2,
              "mamba_d_head": 8, "mamba_n_heads": 8, "mamba_expand": 2, "mamba_chunk_size": 8},
    "zamba2": dict(vocab_size=97, hidden_size=32, num_hidden_layers=4, layers_block_type=["mamba", "hybrid"] * 2,
                   mamba_d_state=16, mamba_ngroups=2, mamba_headdim=8, n_mamba_heads=8, mamba_expand=2,
                   num_attention_heads=2, num_key_value_heads=2, attention_head_dim=32, intermediate_size=64,
                   chunk_size=8, adapter_rank=8, tie_word_embeddings=True),
}

# --- the fields, first value the base's ---------------------------------------------------------------------------
_GDN = {  # transformers' Gated DeltaNet layer (Qwen3.5 / Qwen3.5-MoE / Qwen3-Next / OLMo-hybrid)
    "linear_num_key_heads": [2, 4, 1],            # 4 value heads: 2, 1 or 4 per key head (the kernel's repeat)
    "linear_conv_kernel_dim": [4, 2],             # the causal conv's taps (and its cache's width)
    "layer_types": ["LLLF", "FLLL"],              # where the softmax block sits
}
_SOFTMAX = {"num_key_value_heads": [1, 2], "attention_bias": [False, True]}
AXES: dict[str, dict[str, list]] = {
    "qwen3_5_text": {**_GDN, **_SOFTMAX, "linear_value_head_dim": [8, 16],
                     "hidden_act": ["silu", "gelu"],         # the GDN conv's activation and the MLP's
                     "tie_word_embeddings": [True, False]},
    "qwen3_5_moe_text": {**_GDN, "attention_bias": [False, True], "num_experts_per_tok": [1, 2],
                         "hidden_act": ["silu", "gelu"]},
    "qwen3_next": {**_GDN, "attention_bias": [False, True], "decoder_sparse_step": [1, 2],
                   "mlp_only_layers": [[], [0]], "norm_topk_prob": [True, False], "num_experts_per_tok": [1, 2]},
    "olmo_hybrid": {**_GDN, **_SOFTMAX, "linear_allow_neg_eigval": [True, False], "hidden_act": ["silu", "gelu"]},
    "kimi_linear": {"q_lora_rank": [None, 16], "linear_conv_kernel_dim": [4, 2], "layer_types": ["LLFL", "FLLL"],
                    "mlp_layer_types": ["DSSS", "SDSD"], "routing": ["plain", "grouped"],
                    "norm_topk_prob": [True, False], "n_shared_experts": [1, 2], "attention_bias": [False, True],
                    "hidden_act": ["silu", "gelu"]},
    "mamba2": {"n_groups": [2, 1, 8], "use_bias": [False, True], "use_conv_bias": [True, False], "conv_kernel": [4, 2],
               "time_step_limit": [(0.0, float("inf")), (0.05, 1.0)], "chunk_size": [8, 5],
               "residual_in_fp32": [True, False], "tie_word_embeddings": [True, False]},
    "nemotron_h": {"hybrid_override_pattern": ["M*M-", "ME*M"], "n_groups": [2, 1], "use_bias": [False, True],
                   "use_conv_bias": [True, False], "conv_kernel": [4, 2], "mlp_bias": [False, True],
                   "mlp_hidden_act": ["relu2", "silu"], "num_key_value_heads": [1, 2], "moe_latent_size": [None, 16]},
    "granitemoehybrid": {"layer_types": ["MAMM", "MMAM"], "num_local_experts": [4, 0],
                         "position_embedding_type": [None, "rope"], "mamba_n_groups": [2, 1],
                         "mamba_conv_bias": [True, False], "mamba_proj_bias": [False, True],
                         "mamba_d_conv": [4, 2], "attention_bias": [False, True],
                         "multipliers": ["none", "granite"]},
    "falcon_h1": {"mamba_rms_norm": [False, True], "mamba_norm_before_gate": [True, False],
                  "mamba_n_groups": [2, 1], "mamba_conv_bias": [True, False], "mamba_proj_bias": [False, True],
                  "mamba_d_conv": [4, 2], "projectors_bias": [False, True], "attention_bias": [False, True],
                  "mlp_bias": [False, True]},
    "bamba": {"attn_layer_indices": [[1], [0]], "mamba_n_groups": [2, 1], "mamba_conv_bias": [True, False],
              "mamba_proj_bias": [False, True], "mamba_d_conv": [4, 2], "num_key_value_heads": [1, 2],
              "attention_bias": [False, True], "mlp_bias": [False, True]},
    "zamba2": {"use_shared_attention_adapter": [False, True], "num_mem_blocks": [1, 2], "use_mem_rope": [False, True],
               "add_bias_linear": [False, True], "use_conv_bias": [True, False], "mamba_ngroups": [2, 1],
               "mamba_d_conv": [4, 2]},
}

_LAYERS = {"L": L, "F": F, "M": "mamba", "A": "attention", "D": "dense", "S": "sparse"}
# values whose meaning is several config fields
_EXPAND = {
    "routing": {"plain": {}, "grouped": {"n_group": 2, "topk_group": 1}},   # Kimi's grouped top-k router
    "multipliers": {"none": {}, "granite": {"embedding_multiplier": 4.0, "logits_scaling": 2.0,
                                            "residual_multiplier": 0.5, "attention_multiplier": 0.2}},
}


def _valid(model_type: str, case: dict) -> bool:
    """transformers can build it: the constraints its config classes check."""
    if case.get("moe_latent_size") is not None and case.get("hybrid_override_pattern", "E") == "M*M-":
        return False        # the latent projection belongs to an MoE block: without one the pair is meaningless
    return True


def pairwise(model_type: str) -> list[dict]:
    return covering(AXES[model_type], lambda case: _valid(model_type, case))


def config_fields(model_type: str, case: dict) -> dict:
    out = {}
    for name, value in case.items():
        if name in _EXPAND:
            out.update(_EXPAND[name][value])
        elif name in ("layer_types", "mlp_layer_types") and isinstance(value, str):
            out[name] = [_LAYERS[c] for c in value]
        else:
            out[name] = value
    return out


def case_id(model_type: str, case: dict) -> str:
    defaults = {n: v[0] for n, v in AXES[model_type].items()}
    changed = [f"{n}={v}".replace(" ", "") for n, v in case.items() if v != defaults[n]]
    return f"{model_type}[{','.join(changed) or 'defaults'}]"


def all_cases() -> list[tuple[str, dict]]:
    return [(t, case) for t in AXES for case in pairwise(t)]


def make_config(model_type: str, case: dict):
    from transformers import AutoConfig
    return AutoConfig.for_model(model_type, **{**BASE[model_type], **config_fields(model_type, case)})


def wake(model, seed: int = 1) -> None:
    """Every parameter transformers initialises to one value (norm weights, biases, D, the MoE routers' bias) given a
    spread, and every matrix (experts' stacked ones too) drawn at std 0.02 redrawn at the std of its fan-in (its last
    dimension), so no mixer, expert or bias has a faint or vacuous effect on the logits."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            fan_in = p.shape[-1]
            constant = flat.numel() == 1 or bool((flat == flat[0]).all())
            if p.dim() >= 2 and p.shape[-1] > 1 and (constant or float(flat.std()) < 0.5 / math.sqrt(fan_in)):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif constant:
                c = float(flat[0])
                p.add_(torch.randn(p.shape, generator=gen) * 0.2 * max(abs(c), 0.5))


def make_tf_model(model_type: str, case: dict, seed: int = 0):
    """The case's model (transformers' own classes, fp32, CPU, eval), every parameter awake; the decays and step
    sizes spread as the family cases spread them, so the recurrence matters at this size."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(make_config(model_type, case)).float().eval()
    wake(model, seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(-2.0, 1.0, generator=gen))
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(p.shape).uniform_(-2.0, 0.5, generator=gen))
    return model


def unawake(model) -> list[str]:
    return [n for n, p in model.named_parameters()
            if p.numel() > 1 and bool((p.reshape(-1) == p.reshape(-1)[0]).all())]


def cache_tensors(cache, prefix: str = "cache") -> dict:
    """Every tensor a transformers cache holds (recurrent and SSM states, conv windows, keys and values), by its
    attribute path: the same transformers gives the same paths in both processes."""
    out: dict = {}
    if isinstance(cache, torch.Tensor):
        out[prefix] = cache
    elif isinstance(cache, (list, tuple)):
        for i, item in enumerate(cache):
            out.update(cache_tensors(item, f"{prefix}[{i}]"))
    elif isinstance(cache, dict):
        for key, item in cache.items():
            out.update(cache_tensors(item, f"{prefix}.{key}"))
    elif hasattr(cache, "__dict__") and not isinstance(cache, (type, torch.nn.Module)):
        for key, item in vars(cache).items():
            if not key.startswith("_") and key != "config":
                out.update(cache_tensors(item, f"{prefix}.{key}"))
    return out


def decoded(model, ids, prefix: int):
    """family_cases.decoded for transformers 5: the cache goes back in under the name the model's forward takes
    (`cache` for Mamba-2, which ignores a deprecated `past_key_values`), with its position."""
    import inspect
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        full = model(ids, use_cache=True)
        cache = model(ids[:, :prefix], use_cache=True).past_key_values
        steps = []
        for t in range(prefix, ids.shape[1]):
            out = model(ids[:, t:t + 1], use_cache=True, cache_position=torch.tensor([t]), **{name: cache})
            cache = out.past_key_values
            steps.append(out.logits)
    return full, torch.cat(steps, 1), cache
