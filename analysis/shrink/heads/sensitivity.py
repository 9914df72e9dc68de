"""Each head removed alone: the loss it costs, with its paired standard error (the head-level sensitivity map).

Removing a head is zeroing its output where the family's heads last stay separate (adapter.head_output: the
output projection's input, or Mamba-2's grouped norm's); the head-pruned model equals exactly that
(analysis.archs.heads, proved per family by tests/archs/test_heads.py), so one forward pass per head suffices and
no model is built. The loss is each sequence's mean next-token loss in nats (for equal-length windows of text,
the mean over windows is Δ log perplexity); Δ is paired per sequence: mean and standard error of the
per-sequence differences.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from analysis.archs import adapter_for
from analysis.data import corpus as data
from analysis.models import limits
from analysis.models.forward import is_streamed, run_batches
from analysis.models.load import linear_layers
from analysis.runtime.allocator import trim
from analysis.runtime.cancel import check

BATCH = 8


@contextmanager
def heads_zeroed(model, layer_index: int, heads):
    """While inside: the listed value heads of linear layer `layer_index` output zeros (the model is restored on
    exit; callers hold the model's lock where it is shared)."""
    adapter = adapter_for(model)
    layer = linear_layers(model)[layer_index]
    width = adapter.value_dim(layer.module)

    def hook(_module, args):
        x = args[0].clone()
        for h in heads:
            x[..., h * width:(h + 1) * width] = 0
        return (x, *args[1:])
    handle = adapter.head_output(layer.module).register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def sequence_losses(model, ids: torch.Tensor, cancel=None) -> torch.Tensor:
    """[N] mean next-token loss (nats) of each sequence."""
    if is_streamed(model):
        return _streamed_sequence_losses(model, ids, cancel)
    device = next(model.parameters()).device
    out = []
    for batch in ids.split(BATCH):
        check(cancel)
        batch = batch.to(device)
        logits = model(batch, use_cache=False).logits[:, :-1].float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="none")
        out.append(loss.view(batch.shape[0], -1).mean(1).double().cpu())
    return torch.cat(out)


def _streamed_sequence_losses(model, ids: torch.Tensor, cancel=None) -> torch.Tensor:
    """sequence_losses of a streamed model: batches as the budget holds them, each layer read once for all of them,
    and the loss summed over chunks of the logits (the model's own chunks, so they never exceed the budget)."""
    per = limits.fitting_batch(model, BATCH, ids.shape[1], reserve=_held(ids.numel()))
    batches = list(ids.split(per))
    nats = [torch.zeros(b.shape[0], dtype=torch.float64) for b in batches]

    def score(m: int, first: int, logits: torch.Tensor) -> None:
        targets = batches[m][:, first + 1:first + 1 + logits.shape[1]]   # the last position predicts nothing
        n = targets.shape[1]
        if n:
            loss = torch.nn.functional.cross_entropy(logits[:, :n].float().flatten(0, 1), targets.flatten(),
                                                     reduction="none")
            nats[m] += loss.view(targets.shape[0], n).double().sum(1)
    run_batches(model, batches, on_logits=score, cancel=cancel)
    return torch.cat(nats) / (ids.shape[1] - 1)


def _held(tokens: int) -> int:
    """What the losses hold beside their forwards: the ids and the baseline and current loss of every sequence,
    and the train split's ids the process keeps encoded."""
    return tokens * 8 + data.held_bytes()


def check_removal_memory(model, sequences: int, tokens: int, held: int = 0) -> None:
    """One sentence, before any work, when one forward of the removal losses does not fit (streamed: one sequence
    at a time, its logits in the model's chunks; in memory: BATCH sequences with whole logits)."""
    per = limits.fitting_batch(model, min(BATCH, sequences), tokens, reserve=held + _held(sequences * tokens))
    limits.require(held + _held(sequences * tokens) + limits.forward_bytes(model, per, tokens, states=False),
                   f"Measuring each head's removal on {sequences:,} × {tokens:,} calibration tokens ({per} "
                   f"sequence{'s' if per != 1 else ''} per forward)",
                   "use fewer calibration sequences or tokens (--calib-sequences, --calib-tokens) or raise "
                   "--max-memory", next(model.parameters()).device)


def paired(delta: torch.Tensor) -> dict:
    """Mean and standard error of paired per-sequence differences."""
    n = delta.numel()
    se = float(delta.std(unbiased=True)) / math.sqrt(n) if n > 1 else None
    return {"delta": float(delta.mean()), "se": se, "sequences": n}


def sequence_losses_point(model, ids: torch.Tensor, cancel=None) -> dict:
    """The unpruned model's per-sequence losses as a point of the point executor (analysis.io.points)."""
    return {"losses": sequence_losses(model, ids, cancel).tolist()}


def head_removal_point(model, ids: torch.Tensor, base_losses: list[float], layer: int, head: int,
                       cancel=None) -> dict:
    """One head of linear layer `layer` removed alone, paired against `base_losses` (here or on a Ray worker)."""
    with heads_zeroed(model, layer, [head]):
        losses = sequence_losses(model, ids, cancel)
    return {"layer": layer, "head": head, **paired(losses - torch.tensor(base_losses, dtype=torch.float64))}


def head_removal_losses(model, ids: torch.Tensor, cancel=None, progress=None) -> list[list[dict]]:
    """Per linear layer, per value head: Δ mean loss (nats per token) when that head alone is removed, paired SE.
    progress(done, total) after each head."""
    base = sequence_losses(model, ids, cancel)
    layers = linear_layers(model)
    total, done, out = sum(layer.value_heads for layer in layers), 0, []
    for layer in layers:
        row = []
        for h in range(layer.value_heads):
            with heads_zeroed(model, layer.index, [h]):
                row.append({"head": h, **paired(sequence_losses(model, ids, cancel) - base)})
            done += 1
            if progress:
                progress(done, total)
        out.append(row)
    trim()   # the per-head forwards' small tensors leave free pages inside the heap: hand them back
    return out
