"""The real recurrence inputs of every linear-attention layer for one text: one forward pass, then any head.

The forward runs as usual; `analysis.runtime.backend.observe_recurrences` hands over each layer's prepared inputs
(q, k, v, β, log-decay g, scale: exactly what the recurrence op receives, grouped value heads already
expanded), whatever the family, because every adapter routes its recurrence through the backend. "Head" is
the recurrence's head, i.e. the value head; with grouped value heads several of them share one key head.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from analysis.runtime.backend import observe_recurrences
from analysis.runtime.recurrences import L2_EPS, RecurrenceInputs
from analysis.data.corpus import encode
from analysis.errors import AnalysisError, count
from analysis.models.layers import attention_layers
from analysis.inspect.state_lab.rules import HeadInputs

MAX_TOKENS = 512  # a scrubber over more positions is unreadable, and every token costs a state per rule


@dataclass
class Observation:
    token_ids: list[int]
    tokens: list[str]                   # each token's text, for labels
    layers: list[RecurrenceInputs]      # per linear layer, batch of one, on the CPU

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def heads(self, layer: int) -> int:
        return self.layers[layer].k.shape[2]


def l2_normalise(x: torch.Tensor) -> torch.Tensor:
    """fla's in-kernel l2 norm, x / sqrt(Σx² + 1e-6): the eps matters for the small post-conv keys of tiny models."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + L2_EPS)


def text_ids(tokenizer, text: str, max_tokens: int = MAX_TOKENS) -> torch.Tensor:
    """Token ids of `text` [T]; one sentence when it is empty or longer than the lab can step through."""
    if not text or not text.strip():
        raise AnalysisError("The text is empty; type a sentence (or pick a prepared one) for the lab to read.")
    ids = encode(text, tokenizer)
    if len(ids) > max_tokens:
        raise AnalysisError(f"The text has {count(len(ids), 'token')}, more than the {max_tokens} the State lab "
                            "steps through; shorten it to a sentence or a paragraph.")
    if len(ids) == 0:
        raise AnalysisError("The text gives no tokens; type a sentence with some words in it.")
    return ids


def observe(model, ids: torch.Tensor, tokens: list[str] | None = None) -> Observation:
    """Run `model` once on ids [T] and keep every linear layer's recurrence inputs (fp32, CPU)."""
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    if ids.numel() == 0 or ids.shape[1] > MAX_TOKENS:
        raise AnalysisError(f"The State lab reads 1 to {MAX_TOKENS} tokens, got {ids.shape[1]}.")
    vocab = model.config.vocab_size
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise AnalysisError(f"Token ids must lie in [0, {vocab - 1}] for this model's vocabulary.")
    attns = attention_layers(model)
    seen: list[RecurrenceInputs | None] = [None] * len(attns)
    calling = {"layer": None}
    hooks = [a.register_forward_pre_hook(lambda _m, _a, i=i: calling.update(layer=i)) for i, a in enumerate(attns)]

    def keep(r: RecurrenceInputs) -> None:
        cpu = {f: (getattr(r, f).float().cpu() if torch.is_tensor(getattr(r, f)) else getattr(r, f))
               for f in r.__dataclass_fields__}
        seen[calling["layer"]] = RecurrenceInputs(**cpu)

    device = next(model.parameters()).device
    try:
        with torch.no_grad(), observe_recurrences(keep):
            model(ids.to(device), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    if any(s is None for s in seen):
        raise AnalysisError("Some linear-attention layers never ran their recurrence on this input; "
                            "the State lab cannot observe them.")
    names = tokens if tokens is not None else [str(int(i)) for i in ids[0]]
    return Observation(token_ids=ids[0].tolist(), tokens=list(names), layers=seen)


def head_inputs(obs: Observation, layer: int, head: int, label: str = "") -> HeadInputs:
    """One head's inputs; one sentence for a layer or head the model does not have."""
    if not isinstance(layer, int) or not 0 <= layer < obs.n_layers:
        raise AnalysisError(f"Layer {layer} does not exist: this model has linear-attention layers "
                            f"0–{obs.n_layers - 1}; pick one of those.")
    heads = obs.heads(layer)
    if not isinstance(head, int) or not 0 <= head < heads:
        raise AnalysisError(f"Head {head} does not exist in layer {layer}: it has heads 0–{heads - 1}; "
                            "pick one of those.")
    r = obs.layers[layer]
    key_heads = r.k_raw.shape[2] if r.k_raw is not None else heads
    kh = head // (heads // key_heads)                     # the key head this value head reads
    g = None if r.g is None else r.g[0, :, head]
    k = r.k[0, :, head]
    k_raw = None if r.k_raw is None else r.k_raw[0, :, kh]
    # the keys are the l2 norm of k_raw (in the kernel or the layer): a pruned key must be re-normalised the same way
    unit = k_raw is not None and bool(torch.allclose(k, l2_normalise(k_raw), rtol=1e-4, atol=1e-6))
    return HeadInputs(q=r.q[0, :, head], k=k, v=r.v[0, :, head], beta=r.beta[0, :, head], g=g, scale=float(r.scale),
                      recurrence=r.recurrence, k_raw=k_raw,
                      q_raw=None if r.q_raw is None else r.q_raw[0, :, kh],
                      unit_keys=unit, label=label or f"layer {layer}, head {head}",
                      a=None if r.a is None else r.a[0, :, head], b=None if r.b is None else r.b[0, :, head])


def key_head_of(obs: Observation, layer: int, head: int) -> int:
    """The key head value head `head` of `layer` reads (they differ with grouped value heads)."""
    r = obs.layers[layer]
    heads = obs.heads(layer)
    return head // (heads // (r.k_raw.shape[2] if r.k_raw is not None else heads))
