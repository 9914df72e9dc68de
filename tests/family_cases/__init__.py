"""One test case per adapter family: a tiny random-init model and a token-by-token reference of its states."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class FamilyCase:
    name: str                                  # family key in analysis.archs.FAMILIES
    make_model: Callable[[], "nn.Module"]       # tiny random-init fp32 CPU model, eval(), seeded, built via transformers/fla
    reference_states: Callable                 # (model, layer_index, hidden_in [B,T,D]) -> all states [B,T,Hv,dk,dv]:
                                               # a token-by-token loop written from the family's definition
                                               # (projections, conv, activation, l2norm, gate, grouping)


CASE_MODULES = ["delta_net", "gated_deltanet", "fla_hybrid", "kda", "qwen3_5", "kimi_linear", "mamba2", "gla",
                "rwkv7"]  # imported lazily, missing ones skipped


def logits(model, ids):
    """The model's no-grad logits without a cache (what the family tests compare)."""
    import torch
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def assert_close(a, b, tol=1e-4):
    """max |a − b| within tol, relative to max |b| when that exceeds 1."""
    assert (a - b).abs().max() <= tol * max(1.0, float(b.abs().max())), float((a - b).abs().max())


def states_and_layer_inputs(model, ids):
    """Every linear layer's states (collect_states, kept) and the hidden states each layer received, captured
    by forward pre-hooks in the same pass: what a family's token-by-token reference starts from."""
    from analysis.inspect.states import collect_states
    from analysis.models.load import attention_layers
    layers, inputs = attention_layers(model), {}
    hooks = [m.register_forward_pre_hook(
        lambda _m, args, kwargs, i=i: inputs.__setitem__(i, (args[0] if args else kwargs["hidden_states"]).detach()),
        with_kwargs=True) for i, m in enumerate(layers)]
    try:
        trace = collect_states(model, ids, keep_states=True, compute_metrics=False)
    finally:
        for h in hooks:
            h.remove()
    assert len(trace.layers) == len(layers) == len(inputs)
    return trace, inputs


def decoded(model, ids, prefix: int):
    """The full no-grad forward with cache, then a prefill of ids[:, :prefix] and one cached step per later token:
    (full output, the steps' logits concatenated, the last cache)."""
    import torch
    with torch.no_grad():
        full = model(ids, use_cache=True)
        cache = model(ids[:, :prefix], use_cache=True).past_key_values
        steps = []
        for t in range(prefix, ids.shape[1]):
            out = model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
    return full, torch.cat(steps, 1), cache


def layer_input(adapter, model, layer_index: int, hidden_in):
    """(linear layer `layer_index` of `model`, its input as fp32): where a reference_states loop starts."""
    return adapter.linear_layers(model)[layer_index], hidden_in.float()


def heads_zeroed_logits(model, ids, kept_value_heads):
    """The zeroed-heads reference: `model`'s logits with every value head not in kept_value_heads[l] outputting
    zeros where the adapter says heads last stay separate (its head_output: o_proj's input, or Mamba-2's grouped
    norm's), by forward pre-hooks on the unchanged model."""
    import torch

    from analysis.archs import adapter_for
    from analysis.models.load import linear_layers
    adapter, hooks = adapter_for(model), []

    def zero(drop, width):
        def hook(_module, args):
            x = args[0].clone()
            for h in drop:
                x[..., h * width:(h + 1) * width] = 0
            return (x, *args[1:])
        return hook
    for layer, kept in zip(linear_layers(model), kept_value_heads):
        drop = [h for h in range(layer.value_heads) if h not in set(int(k) for k in kept)]
        hooks.append(adapter.head_output(layer.module).register_forward_pre_hook(
            zero(drop, adapter.value_dim(layer.module))))
    try:
        return logits(model, ids)
    finally:
        for h in hooks:
            h.remove()


def fewer_heads(model, seed: int = 0) -> list[int]:
    """A head plan that drops heads in every linear layer that has more than one: each layer keeps an expressible count below its value
    heads, a different one per layer where it has several (so per-layer counts are exercised)."""
    from analysis.models.load import linear_layers
    from analysis.shrink.heads.prune import keepable_counts
    counts = []
    for i, layer in enumerate(linear_layers(model)):
        below = [n for n in keepable_counts(layer) if n < layer.value_heads]
        counts.append(below[-1 - (i + seed) % len(below)] if below else layer.value_heads)   # one head: kept
    return counts


def channels_zeroed(model, selections):
    """A copy of the model whose dropped q/k channels are zero in every row block the adapter names (projection
    rows and short-convolution weights and biases): after the convolution (SiLU(0) = 0) they are exactly zero."""
    import copy

    import torch

    from analysis.archs import adapter_for
    from analysis.models.load import linear_layers
    zeroed = copy.deepcopy(model)
    adapter = adapter_for(zeroed)
    with torch.no_grad():
        for layer, sel in zip(linear_layers(zeroed), selections):
            keep = torch.zeros(layer.key_heads, layer.key_dim, dtype=torch.bool).scatter_(1, sel.indices, True)
            for rows in adapter.channel_rows(layer.module):
                if rows.role not in ("q", "k"):
                    continue
                stride = getattr(rows, "head_stride", 0) or layer.key_dim
                dropped = [rows.start + h * stride + i for h in range(layer.key_heads)
                           for i in range(layer.key_dim) if not keep[h, i]]
                layer.module.get_parameter(rows.param)[dropped] = 0
    return zeroed


def post_conv_qk(model, ids):
    """(q, k) as each linear layer's recurrence reads them (post-conv, pre-l2norm), in one no-grad forward."""
    import torch

    from analysis.runtime.backend import observe_recurrences
    seen = []
    with torch.no_grad(), observe_recurrences(lambda r: seen.append((r.q_raw, r.k_raw))):
        model(ids, use_cache=False)
    return seen
