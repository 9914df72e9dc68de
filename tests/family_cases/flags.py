"""Issue 41: every fla config field that changes which modules or kernels run, covered pairwise (all pairs of values of
any two fields appear in some case) by tiny random-init models of one factory, every parameter awake.

The fields and their values are read from fla 0.6's config classes and layer code (fla/models/*/configuration_*.py,
fla/layers/*.py, fla/models/modeling_utils.py; docs/config-flags.md has the table). Refused combinations (REFUSED)
are not built: the project refuses them before loading, in one sentence naming the field.
"""
from __future__ import annotations

import importlib
import itertools
import math
import random

import torch

# A hybrid's softmax block: fla's `attn` setting (get_attention: num_heads, num_kv_heads, qkv_bias, window_size,
# rope_theta): block 1 of 2, grouped KV heads, q/k/v biases and a sliding window (the other fields' defaults are
# what the family cases' own hybrids use).
HYBRID_GQA = {"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": True, "window_size": 8}

# Fields every family shares (the block, the MLP, the norms, the kernel mode, the hybrid's softmax blocks).
_COMMON = {
    "attn_mode": ["chunk", "fused_recurrent"],     # the layer's kernel for > 64 tokens (≤ 64: fused_recurrent)
    "fuse_norm": [True, False],                    # fla's Triton RMSNorm/LayerNorm or torch's
    "attn": [None, HYBRID_GQA],                     # a softmax-attention hybrid (not RWKV-7: refused)
    "loss": ["fused", "fused_linear", "torch"],     # the loss of a forward with labels (the gradient strategy's)
}
_MLP = {  # fla's GatedMLP: SwiGLU (Triton swiglu_linear when fused) or PowGLU
    "fuse_swiglu": [True, False],
    "hidden_act": ["swish", "powlu"],
}

AXES: dict[str, dict[str, list]] = {
    "delta_net": {**_COMMON, **_MLP,
                  "use_gate": [False, True], "use_short_conv": [True, False], "use_beta": [True, False],
                  "allow_neg_eigval": [False, True], "qk_activation": ["silu", "relu", "elu", "identity"],
                  "qk_norm": ["l2", "sum"], "expand_k": [1.0, 0.5], "expand_v": [1.0, 2.0]},
    "gated_deltanet": {**_COMMON, **_MLP,
                       "use_gate": [True, False], "use_short_conv": [True, False], "allow_neg_eigval": [False, True],
                       "num_v_heads": [None, 4], "expand_v": [1.0, 2.0],
                       "output_gate_activation": ["swish", "sigmoid"]},
    "kda": {**_COMMON, **_MLP,
            "use_short_conv": [True, False], "allow_neg_eigval": [False, True],
            "gate": ["softplus", "lower_bound", "safe_gate"],   # safe_gate / lower_bound (fla: safe needs a bound)
            "num_v_heads": [None, 4], "expand_v": [1.0, 0.5]},
    "gla": {**_COMMON, "fuse_swiglu": [True, False],
            "use_short_conv": [False, True], "use_output_gate": [True, False],
            "feature_map": [None, "relu", "swish", "sigmoid"], "clamp_min": [None, -0.1],
            "elementwise_affine": [True, False], "expand_k": [0.5, 1.0], "expand_v": [1.0, 0.5]},
    "rwkv7": {**{k: v for k, v in _COMMON.items() if k != "attn"}, "norm_first": [True, False], "norm_bias": [True, False],
              "hidden_act": ["sqrelu", "relu"]},   # value_dim ≠ hidden_size: fla 0.6 cannot build it (its init)
}

# Values whose meaning is several config fields (KDA's decay form).
_EXPAND = {"loss": {"fused": {}, "fused_linear": {"fuse_cross_entropy": False, "fuse_linear_cross_entropy": True},
                    "torch": {"fuse_cross_entropy": False}},
           "gate": {"softplus": {}, "lower_bound": {"lower_bound": -5.0}, "safe_gate": {"safe_gate": True,
                                                                                        "lower_bound": -5.0}}}


def _valid(family: str, case: dict) -> bool:
    """fla can build it (or the pair is meaningless): the constraints its layers assert."""
    if family == "gla" and case.get("hidden_act", "swish") != "swish":
        return False
    return True


CANDIDATES = 40


def pairwise(family: str) -> list[dict]:
    """A deterministic all-pairs covering of AXES[family]: every pair of values of two fields appears in at least
    one case that _valid accepts."""
    return covering(AXES[family], lambda case: _valid(family, case))


def covering(axes: dict[str, list], valid) -> list[dict]:
    """A deterministic all-pairs covering of `axes` (greedy, AETG-style): every pair of values of two fields appears
    in at least one case that `valid` (a partial case -> bool) accepts."""
    names = list(axes)
    key = lambda v: repr(v)   # noqa: E731  (dicts and None as hashable labels)
    uncovered = {((a, key(x)), (b, key(y))) for a, b in itertools.combinations(names, 2)
                 for x in axes[a] for y in axes[b]
                 if valid({a: x, b: y})}
    rng = random.Random(0)
    cases = []
    while uncovered:
        best_case, best_cover = None, set()
        for _ in range(CANDIDATES):   # AETG: several greedy candidates from a fresh uncovered pair, keep the best
            (a, xa), (b, xb) = rng.choice(sorted(uncovered))
            case = {a: next(v for v in axes[a] if key(v) == xa), b: next(v for v in axes[b] if key(v) == xb)}
            for name in rng.sample(names, len(names)):
                if name in case:
                    continue
                options = [v for v in axes[name] if valid({**case, name: v})]
                gains = [sum(((n, key(case[n])), (name, key(v))) in uncovered or
                             ((name, key(v)), (n, key(case[n]))) in uncovered for n in case) for v in options]
                case[name] = options[gains.index(max(gains))]
            case = {n: case[n] for n in names}
            cover = {((p, key(case[p])), (q, key(case[q]))) for p, q in itertools.combinations(names, 2)} & uncovered
            if len(cover) > len(best_cover):
                best_case, best_cover = case, cover
        uncovered -= best_cover
        cases.append(best_case)
    return cases


def config_fields(family: str, case: dict) -> dict:
    """The case's values as config fields (one value can set several)."""
    out = {}
    for name, value in case.items():
        out.update(_EXPAND[name][value] if name in _EXPAND else {name: value})
    return out


def case_id(family: str, case: dict) -> str:
    defaults = {n: v[0] for n, v in AXES[family].items()}
    changed = [f"{n}={'hybrid' if v == HYBRID_GQA else v}"
               for n, v in case.items() if v != defaults[n]]
    return f"{family}[{','.join(changed) or 'defaults'}]"


def all_cases() -> list[tuple[str, dict]]:
    return [(family, case) for family in AXES for case in pairwise(family)]


def wake(model, seed: int = 1) -> None:
    """Give every parameter fla initialises to one constant value (zeros: RWKV-7's o_proj and LoRA inputs, biases;
    ones: norm weights; KDA's safe-gate A_log) a spread of values, and every matrix fla draws at std 0.02 (which
    leaves the token mixers a faint effect on the logits) the std of its fan-in, 1/√in, so no equality is vacuous."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            if p.dim() == 2 and float(flat.std()) < 0.5 / math.sqrt(p.shape[1]):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            elif flat.numel() > 1 and bool((flat == flat[0]).all()) or flat.numel() == 1:
                if p.dim() == 2:
                    p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
                else:
                    c = float(flat[0])
                    p.add_(torch.randn(p.shape, generator=gen) * 0.2 * max(abs(c), 0.5))


def make_flag_model(family: str, case: dict, seed: int = 0):
    """The family's tiny case model (tests/family_cases/<family>.py) with the case's config fields, every parameter
    awake; fp32, CPU, eval mode."""
    maker = importlib.import_module(f"family_cases.{family}").make_model
    fields = config_fields(family, case)
    model = maker(**fields) if family == "kda" else maker(seed, **fields)
    wake(model, seed + 1)
    return model


def unawake(model) -> list[str]:
    """Parameters that still hold one value everywhere (none after wake)."""
    return [n for n, p in model.named_parameters()
            if p.numel() > 1 and bool((p.reshape(-1) == p.reshape(-1)[0]).all())]
