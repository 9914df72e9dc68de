"""What a prune changes, measured the same way before and after: quality, size, state, kernel time.

Quality is text perplexity (dataset/split/context/stride/tokens stated) for a language model, or recall
accuracy by number of stored pairs for a recall-trained model (which has no tokenizer), and optionally the
accuracy of lm-evaluation-harness tasks (analysis.evaluate.harness, with the harness's standard errors). Kernel time is
the whole model's: the recurrence kernel timed at every layer's key dim (each distinct dim once) and summed
over the layers, on the model's own device, with its shape; a per-layer plan is never timed at layer 0 only.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from analysis.archs import adapter_for
from analysis.runtime.cancel import check
from analysis.evaluate.perplexity import perplexity
from analysis.evaluate.latency import kernel_latency
from analysis.models.load import describe
from analysis.models.key_plan import tiles
from analysis.evaluate.recall_eval import RECALL_SEED, recall_report

LATENCY_SHAPE = dict(batch=2, tokens=512)  # as the sweep times it, so the two pages agree


@dataclass(frozen=True)
class Evaluation:
    """How a model is measured (before, after and recovered alike; a sweep point, a map point, a candidate plan):
    the one type of evaluation settings, core and dashboard alike."""
    split: str = "test"
    context: int = 256
    max_tokens: int | None = 4096
    recall_pairs: tuple[int, ...] | None = None   # set: a recall model, scored on recall accuracy
    recall_sequences: int = 64
    latency: bool = True                          # time the kernel at every layer's key dim
    tasks: object = None                          # lm-evaluation-harness tasks: a TaskSettings (or its loaded plan)
    confirmed: bool = False                       # run a task evaluation estimated at over an hour (--yes)
    per_window: bool = False                      # keep each window's mean loss, `window_losses` (paired comparisons)
    recall_seed: int = RECALL_SEED                # the recall sequences' seed (the sensitivity map has its own)
    start: int = 0                                # the first token of the split read (analysis.data.roles)

    def measure(self, model, tokenizer, progress=None, cancel=None, latency: bool | None = None) -> dict:
        return measure(model, tokenizer, self, progress, cancel, latency)

    def loaded(self) -> Evaluation:
        """These settings with the tasks loaded once (names and data checked), for several measurements."""
        from analysis.evaluate.harness import TaskSettings, prepare
        return replace(self, tasks=prepare(self.tasks)) if isinstance(self.tasks, TaskSettings) else self


def measure(model, tokenizer=None, evaluation: Evaluation = Evaluation(), progress=None, cancel=None,
            latency: bool | None = None) -> dict:
    """Architecture figures, perplexity (or recall accuracy), the tasks' accuracy ("tasks", "harness") and the kernel
    time, as `evaluation` says (latency overrides its own): the one measuring path of the workflows (prune, sweep
    point, sensitivity point, allocate-and-choose)."""
    e = evaluation
    tokenizer = None if e.recall_pairs is not None else tokenizer  # a recall model reads its own ids
    info = describe(model)
    out = {"head_k_dims": info.head_k_dims, "value_heads_per_layer": info.value_heads_per_layer,
           "tiles": tiles(info.head_k_dims), "parameters": info.parameters,
           "state_bytes_per_sequence": info.state_bytes_per_sequence, "device": info.device, "dtype": info.dtype}
    half = (lambda f: progress(f / 2)) if progress is not None and e.tasks is not None else progress  # text, then tasks
    if e.recall_pairs is not None:
        out["recall"] = recall_report(model, pairs=tuple(e.recall_pairs), n_sequences=e.recall_sequences,
                                      seed=e.recall_seed)
    else:
        out["perplexity"] = perplexity(model, tokenizer, e.split, e.context, max_tokens=e.max_tokens, progress=half,
                                       per_window=e.per_window, cancel=cancel, start=e.start)
    if e.tasks is not None:
        from analysis.evaluate.harness import evaluate_tasks, task_rows
        check(cancel)
        measured = evaluate_tasks(model, tokenizer, e.tasks, cancel=cancel, yes=e.confirmed,
                                  progress=(lambda f, _text: progress(0.5 + f / 2)) if progress is not None else None)
        out["harness"], out["tasks"] = measured["harness"], task_rows(measured)
    if e.latency if latency is None else latency:
        check(cancel)
        out["kernel"] = model_kernel_time(model, info, cancel)
    return out


def model_kernel_time(model, info, cancel=None) -> dict:
    """Σ over linear-attention layers of the kernel's median time at that layer's key dim and value-head count (a
    head prune makes them differ); the spread fields (IQR, min, max) are summed the same way, so a before/after
    Δ can be judged against them."""
    dims = info.head_k_dims
    heads = info.value_heads_per_layer or [info.value_heads] * len(dims)
    dtype = next(model.parameters()).dtype   # on a GPU, kernel_latency swaps a dtype its kernel refuses
    timed = {}
    for h in sorted(set(heads)):
        for point in kernel_latency(sorted({d for d, n in zip(dims, heads) if n == h}), heads=h,
                                    value_dim=info.head_v_dim, device=info.device, dtype=dtype,
                                    kernel=adapter_for(model).kernel, min_run_time=0.2, **LATENCY_SHAPE):
            timed[(point["key_dim"], h)] = point
            check(cancel)
    shapes = list(zip(dims, heads))
    first = timed[shapes[0]]
    total = lambda f: sum(f(timed[s]) for s in shapes)  # noqa: E731
    return {**{k: first[k] for k in ("op", "kernel", "batch", "tokens", "heads", "value_dim", "dtype", "device",
                                     "device_name", "timer", "threads")},
            "key_dims": list(dims), "value_heads": list(heads), "layers": len(dims),
            "per_layer_ms": [timed[s]["median_ms"] for s in shapes],
            "median_ms": total(lambda p: p["median_ms"]),
            "spread": {"iqr_ms": total(lambda p: p["spread"]["iqr_ms"]), "min_ms": total(lambda p: p["spread"]["min_ms"]),
                       "max_ms": total(lambda p: p["spread"]["max_ms"])},
            "repeats": min(p["repeats"] for p in timed.values()), "noisy": any(p["noisy"] for p in timed.values())}
