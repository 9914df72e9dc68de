"""Perplexity and bits per byte with every setting stated, plus a unigram baseline.

Windows of `context` input tokens start every `stride` tokens; each window predicts the next token at
every position, and only predictions not already scored by an earlier window count (so with
stride < context every scored token sees at least context − stride tokens of history). Every target
token ids[1:1+n] is scored exactly once. Bits per byte = total nats / ln 2 / UTF-8 bytes of exactly
the scored tokens' text, comparable across tokenizers.
"""
from __future__ import annotations

import math

import torch

from analysis.data import corpus as data
from analysis.models import limits, workload
from analysis.models.forward import run_batches
from analysis.errors import AnalysisError, count


def _scored_windows(n_ids: int, context: int, stride: int):
    """(start, first scored offset) for windows whose predictions of ids[start+1:start+1+context] count."""
    scored_until = 0  # targets with index < scored_until + 1 are done
    start = 0
    while start + 1 < n_ids:
        end = min(start + context, n_ids - 1)       # inputs ids[start:end], targets ids[start+1:end+1]
        first = max(0, scored_until - start)
        yield start, end, first
        scored_until = end
        if end == n_ids - 1:
            break
        start += stride


@torch.no_grad()
def perplexity(model, tokenizer, split: str = "test", context: int = 256, stride: int | None = None,
               max_tokens: int | None = None, *, text: str | None = None, batch: int = 8, progress=None,
               per_window: bool = False, cancel=None, yes: bool = False, say=None, start: int = 0) -> dict:
    """Perplexity of `model` on a bundled split (or given text) with dataset/split/context/stride/tokens.

    The scorer beneath analysis.evaluate.measure.Evaluation; over eight parameters, as text and start choose the
    tokens and the keywords after them say how it runs.

    per_window adds `window_losses`: each window's mean nats per scored token, in order (for paired
    comparisons of two models on the same tokens). cancel: checked before every batch of windows
    (analysis.runtime.cancel). Work past an hour here is refused unless `yes`; `say` gets a one-line estimate of
    long work before it starts (analysis.models.workload). start: the first token read (a stretch of the split,
    analysis.data.roles), so the targets are ids[start + 1 : start + 1 + max_tokens]."""
    stride = context if stride is None else stride
    if context < 1 or stride < 1 or stride > context:
        raise AnalysisError(f"Need 1 ≤ stride ≤ context, got context {context} and stride {stride}.")
    if max_tokens is not None and (int(max_tokens) != max_tokens or max_tokens < 1):
        raise AnalysisError(f"The number of tokens to score must be a whole number ≥ 1, got {max_tokens}.")
    batch = limits.fitting_batch(model, batch, context)
    limits.check_forward(model, batch, context, "Scoring perplexity", "use a shorter --context", logits_copies=3,
                         states=False)
    ids = data.encode(text, tokenizer) if text is not None else data.encoded_split(split, tokenizer)
    if start:
        if not 0 <= int(start) < len(ids):
            raise AnalysisError(f"The stretch starts at token {start:,} but the text has {len(ids):,} tokens.")
        ids = ids[int(start):]
    if max_tokens is not None:
        ids = ids[: max_tokens + 1]
    if len(ids) < context + 1:
        raise AnalysisError(f"The text has {count(len(ids), 'token')}, fewer than one context of {context} plus "
                            "one; use a longer text or a shorter --context.")

    device = next(model.parameters()).device
    windows = list(_scored_windows(len(ids), context, stride))
    workload.check(f"Scoring perplexity with stride {stride}", math.ceil(len(windows) / batch), model,
                   min(batch, len(windows)), context, "use a larger stride or fewer tokens to score", yes, say)
    groups = [windows[i:i + batch] for i in range(0, len(windows), batch)]
    batches = []
    for group in groups:
        inputs = torch.zeros(len(group), max(e - s for s, e, _ in group), dtype=torch.long)
        for row, (s, e, _) in enumerate(group):
            inputs[row, : e - s] = ids[s:e]
        batches.append(inputs)
    nats = [[0.0] * len(group) for group in groups]

    def score(g: int, at: int, logits: torch.Tensor) -> None:
        """Scored positions [first, e − s) of each window that fall in this chunk [at, at + n) of its logits."""
        logp = torch.log_softmax(logits.float(), -1)
        for row, (s, e, first) in enumerate(groups[g]):
            lo, hi = max(first, at), min(e - s, at + logp.shape[1])
            if lo < hi:
                targets = ids[s + 1 + lo:s + 1 + hi].to(device)
                nats[g][row] -= float(logp[row, lo - at:hi - at].gather(-1, targets[:, None]).sum())

    run_batches(model, batches, on_logits=score, cancel=cancel, progress=progress)
    total_nats, scored, window_losses = 0.0, [], []
    for g, group in enumerate(groups):
        for row, (s, e, first) in enumerate(group):
            total_nats += nats[g][row]
            window_losses.append(nats[g][row] / (e - s - first))
            scored.append(ids[s + 1 + first:e + 1])
    scored_ids = torch.cat(scored)
    n_bytes = data.utf8_bytes(tokenizer.decode(scored_ids.tolist()))
    trained = getattr(model.config, "max_position_embeddings", None)
    result = {
        "perplexity": math.exp(total_nats / len(scored_ids)),
        "bits_per_byte": total_nats / math.log(2) / n_bytes,
        "loss_nats_per_token": total_nats / len(scored_ids),
        "dataset": data.dataset_label(split) if text is None else "given text",
        "split": split if text is None else None,
        "context": context, "stride": stride, "tokens": len(scored_ids), "bytes": n_bytes,
        "device": str(device), "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
    }
    if start:
        result["start"] = int(start)  # a stretch of the split (analysis.data.roles)
    if per_window:
        result["window_losses"] = window_losses
    if trained and context > trained:
        result["note"] = f"context {context} is longer than the {trained} tokens the model was trained on"
    return result


def unigram_baseline(tokenizer, split: str = "test", max_tokens: int | None = None) -> dict:
    """Add-one-smoothed unigram model fitted on the train split, scored on the same targets."""
    counts = torch.bincount(data.encoded_split("train", tokenizer), minlength=len(tokenizer)).double() + 1
    logp = (counts / counts.sum()).log()
    ids = data.encoded_split(split, tokenizer)
    ids = ids[1: (max_tokens + 1) if max_tokens else None]
    nats = -float(logp[ids].sum())
    n_bytes = data.utf8_bytes(tokenizer.decode(ids.tolist()))
    return {"perplexity": math.exp(nats / len(ids)), "bits_per_byte": nats / math.log(2) / n_bytes,
            "dataset": data.dataset_label(split), "split": split, "tokens": len(ids), "bytes": n_bytes,
            "model": "unigram (train-split counts, add-one smoothing)"}


def paired_difference(a: list[float], b: list[float]) -> dict:
    """Mean and standard error of b − a over paired windows (the same tokens scored by two models)."""
    d = [y - x for x, y in zip(a, b, strict=True)]
    mean = sum(d) / len(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else math.inf
    return {"delta_log_ppl": mean, "se": se, "windows": len(d)}
