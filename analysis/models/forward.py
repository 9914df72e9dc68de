"""The one way the core runs a model over batches, whether it is in memory or streamed (analysis.models.stream).

In memory, each batch is one forward, as before. Streamed, each decoder layer is read once and every batch goes
through it before the next layer is read; the hooks and recurrence observers the caller set see the same calls,
layer by layer instead of batch by batch, with the same operations on the same inputs.
"""
from __future__ import annotations

import contextlib

import torch

from analysis.runtime.cancel import check


def is_streamed(model) -> bool:
    return bool(getattr(model, "streamed", False))


def run_batches(model, batches: list[torch.Tensor], *, on_logits=None, cancel=None, progress=None) -> None:
    """Push every [b, T] batch of token ids through the model.

    on_logits(batch index, first position, logits [b, n, V]) receives each batch's logits, whole in memory and in
    chunks of tokens when streamed (so the logits never exceed the memory budget); without it a streamed run
    skips the LM head. Inside an active analysis.models.prefix cache, a model derived from the cache's unpruned
    model starts each batch at its first changed decoder layer (streamed: on kept layer inputs, reading only the
    blocks from there on). cancel is checked before every batch (streamed: before every batch of every layer).
    progress(fraction) after each batch (streamed: after each layer)."""
    from analysis.models.prefix import active
    prefix = active()  # a set of points sharing the unpruned model's first layers (analysis.models.prefix)
    if is_streamed(model):
        report = None
        if progress is not None:
            report = lambda done, total, *_: progress(done / total)  # noqa: E731
        if prefix is not None:  # a pruned view reads only the blocks from its first changed layer on
            prefix.run_streamed(model, batches, on_logits=on_logits, cancel=cancel, progress=report)
        else:
            model.run(batches, on_logits=on_logits, cancel=cancel, progress=report)
        return
    device = next(model.parameters()).device
    for i, batch in enumerate(batches):
        check(cancel)
        logits = prefix.logits(model, batch) if prefix is not None else model(batch.to(device), use_cache=False).logits
        if on_logits is not None:
            on_logits(i, 0, logits)
        if progress is not None:
            progress((i + 1) / len(batches))


def weights_of(model, module):
    """While inside, `module` (a part of `model`) holds its real weights: a no-op in memory; streamed, the layer
    that holds it is read, and released on the way out."""
    if is_streamed(model):
        return model.weights_of(module)
    return contextlib.nullcontext()
