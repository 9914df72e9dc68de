"""Recall accuracy when Gaussian noise is added to the queries that enter the recurrence.

The rank/noise theory (analysis.linalg.noise) predicts how a noisy query q = k + ε degrades a readout Sᵀq;
this measures the end-to-end effect on the recall task (analysis.data.recall). Noise is added to the output
of every linear layer's query short convolution (the adapter's conv rows of role q: the query after its
convolution and activation, before the kernel's l2 norm), only at the positions where the model must name a queried value. The SNR is defined per
head and token as in analysis.linalg.noise: SNR = ‖q‖² / (dk σ²), so σ = ‖q‖ / sqrt(dk · 10^(snr/10)).

Gated DeltaNet fuses its three convolutions into one call when use_cache=False, which bypasses the
query convolution module; the model is therefore always run with use_cache=True, which takes the
per-projection convolutions (the same arithmetic). Models without short convolutions are not supported.
"""
from __future__ import annotations

import contextlib
import math

import torch

from analysis.errors import AnalysisError
from analysis.models.channel_group import channel_groups
from analysis.models.load import attention_layers
from analysis.data.recall import RecallTask, recall_batch
from analysis.runtime.cancel import Token, check


def query_positions(labels: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: positions t whose next token is a scored value (the queried key tokens)."""
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, :-1] = labels[:, 1:] != -100
    return mask


@contextlib.contextmanager
def _noisy_queries(model, mask: torch.Tensor, snr_db: float | None, seed: int):
    """Forward hooks on each query convolution adding N(0, σ²) noise to its query channels at the masked
    positions (none if snr_db is None). The convolution returns (y [B, T, channels], cache), fla's layout."""
    calls = {"n": 0}
    hooks = []
    gen = torch.Generator().manual_seed(seed)
    for layer in channel_groups(model):
        rows = next((r for r in layer.rows if r.conv and r.role == "q" and r.param.endswith("weight")), None)
        if rows is None:
            raise AnalysisError("Query-noise injection needs a model with short convolutions (use_short_conv=True); "
                                "this model has none.")
        conv = layer.module.get_submodule(rows.param.rsplit(".", 1)[0])
        heads, dk = layer.key_heads, layer.key_dim
        channels = layer.head_index(rows).flatten()
        # one standard-normal draw per layer, reused across SNRs (common random numbers: smooth curves)
        z = torch.randn(*mask.shape, heads, dk, generator=gen)

        def hook(_module, _args, output, z=z, heads=heads, dk=dk, channels=channels):
            calls["n"] += 1
            if snr_db is None:
                return output
            if not (isinstance(output, tuple) and len(output) == 2 and output[0].dim() == 3):
                raise AnalysisError("Query-noise injection needs short convolutions that return (output [batch, "
                                    "tokens, channels], cache) as fla's do; this family's do not.")
            y, final = output
            idx = channels.to(y.device)
            q = y[..., idx].view(*y.shape[:-1], heads, dk).float()
            sigma = q.norm(dim=-1, keepdim=True) / (dk * 10.0 ** (snr_db / 10.0)) ** 0.5
            noise = z.to(y.device) * sigma * mask.to(y.device)[..., None, None]
            noisy = y.clone()
            noisy[..., idx] = (q + noise).to(y.dtype).flatten(-2)
            return noisy, final
        hooks.append(conv.register_forward_hook(hook))
    try:
        yield calls
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def _accuracy(model, task: RecallTask, snr_db: float | None, n_sequences: int, seed: int, batch: int,
              noise_seed: int, cancel: Token = None) -> tuple[float, int]:
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    correct = total = 0
    for index, start in enumerate(range(0, n_sequences, batch)):
        check(cancel)
        ids, labels = recall_batch(task, min(batch, n_sequences - start), gen)
        mask = query_positions(labels)
        with _noisy_queries(model, mask, snr_db, noise_seed + index) as calls:
            logits = model(ids.to(device), use_cache=True).logits[:, :-1]
        if calls["n"] != len(attention_layers(model)):
            raise AnalysisError("The query convolutions were bypassed, so no noise could be injected; "
                                "this architecture is not supported.")
        target = labels[:, 1:].to(device)
        scored = target != -100
        correct += int((logits.argmax(-1)[scored] == target[scored]).sum())
        total += int(scored.sum())
    return correct / total, total


def _check_request(model, task: RecallTask, n_sequences: int, batch: int) -> None:
    if n_sequences < 1 or batch < 1:
        raise AnalysisError(f"n_sequences and batch must be at least 1, got {n_sequences} and {batch}.")
    if model.config.vocab_size < task.vocab_size:
        raise AnalysisError(f"The recall task needs {task.vocab_size} token ids but the model's vocabulary has "
                            f"{model.config.vocab_size}; use a model trained on this recall task.")


def recall_accuracy_at(model, task: RecallTask, snr_db: float | None, n_sequences: int = 256, seed: int = 1234,
                       batch: int = 64, noise_seed: int = 0, cancel: Token = None) -> dict:
    """Recall accuracy at one SNR (dB; None: clean queries), one point of a recall-vs-SNR curve.

    The same sequences (seed) and standard-normal draws (noise_seed) at every SNR, so points computed one
    at a time (to show progress) equal those of the whole curve. Returns {"accuracy": float, "queries": int}.
    `cancel` (analysis.runtime.cancel) is checked before each batch.
    """
    if snr_db is not None and not math.isfinite(float(snr_db)):
        raise AnalysisError(f"The SNR must be a finite number of dB, got {snr_db!r}.")
    _check_request(model, task, n_sequences, batch)
    accuracy, total = _accuracy(model, task, None if snr_db is None else float(snr_db), n_sequences, seed, batch,
                                noise_seed, cancel)
    return {"accuracy": accuracy, "queries": total}
