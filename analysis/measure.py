"""What a prune changes, measured the same way before and after: quality, size, state, kernel time.

Quality is text perplexity (dataset/split/context/stride/tokens stated) for a language model, or recall
accuracy by number of stored pairs for a recall-trained model (which has no tokenizer). Kernel time is
the recurrence kernel at the model's layer-0 key dim, on the model's own device, with its shape.
"""
from __future__ import annotations

from analysis.archs import adapter_for
from analysis.cancel import check
from analysis.evaluate import perplexity
from analysis.latency import kernel_latency
from analysis.models import describe
from analysis.prune import tiles
from analysis.recall_eval import recall_report

LATENCY_SHAPE = dict(batch=2, tokens=512)  # as the sweep times it, so the two pages agree


def measure(model, tokenizer=None, split: str = "test", context: int = 256, max_tokens: int | None = 4096,
            recall_pairs: tuple[int, ...] | None = None, recall_sequences: int = 64, latency: bool = True,
            progress=None, cancel=None) -> dict:
    """Architecture figures plus perplexity (or recall accuracy when `recall_pairs` is given) and latency."""
    info = describe(model)
    out = {"head_k_dims": info.head_k_dims, "tiles": tiles(info.head_k_dims), "parameters": info.parameters,
           "state_bytes_per_sequence": info.state_bytes_per_sequence, "device": info.device, "dtype": info.dtype}
    if recall_pairs is not None:
        out["recall"] = recall_report(model, pairs=tuple(recall_pairs), n_sequences=recall_sequences)
    else:
        out["perplexity"] = perplexity(model, tokenizer, split, context, max_tokens=max_tokens, progress=progress,
                                       cancel=cancel)
    if latency:
        check(cancel)
        dtype = next(model.parameters()).dtype   # on a GPU, kernel_latency swaps a dtype its kernel refuses
        out["kernel"] = next(kernel_latency([info.head_k_dims[0]], heads=info.value_heads, value_dim=info.head_v_dim,
                                            device=info.device, dtype=dtype, kernel=adapter_for(model).kernel,
                                            min_run_time=0.2, **LATENCY_SHAPE))
    return out
