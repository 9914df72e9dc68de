"""Whether a second model can stand beside the loaded one on the same inputs (original vs pruned side by side):
the same family and layout of layers and heads, and the same tokenizer or recall task, so one batch of token ids
means the same text to both. Key dims may differ (that is what pruning changes)."""
from __future__ import annotations

from analysis.data import inputs
from analysis.models import load as models
from analysis.errors import AnalysisError

ADVICE = "compare a pruned version of the loaded model (the Prune page's Save writes one)"


def check_comparable(loaded, other, loaded_name: str, other_name: str) -> None:
    """AnalysisError (one sentence) when `other` cannot read the loaded model's inputs head for head."""
    a, b = models.describe(loaded), models.describe(other)
    if a.family != b.family:
        raise AnalysisError(f"{other_name} is a {b.label} model and {loaded_name} a {a.label} model; {ADVICE}.")
    layout = lambda i: (i.layers, i.heads, i.value_heads, i.head_v_dim)  # noqa: E731
    if layout(a) != layout(b):
        raise AnalysisError(f"{other_name} has {b.layers} layers × {b.heads} heads (dv {b.head_v_dim}) and "
                            f"{loaded_name} {a.layers} × {a.heads} (dv {a.head_v_dim}); {ADVICE}.")
    if a.vocab_size != b.vocab_size:
        raise AnalysisError(f"{other_name} has a vocabulary of {b.vocab_size:,} tokens and {loaded_name} "
                            f"{a.vocab_size:,}, so the same token ids would be different text; {ADVICE}.")
    task_a, task_b = inputs.recall_task(loaded), inputs.recall_task(other)
    if task_a != task_b:
        what = lambda t: "text" if t is None else f"recall sequences ({t.n_pairs} pairs, {t.n_keys} keys)"  # noqa: E731
        raise AnalysisError(f"{other_name} reads {what(task_b)} and {loaded_name} {what(task_a)}, so they cannot "
                            f"read the same inputs; {ADVICE}.")
    if task_a is None and models.load_tokenizer(loaded).get_vocab() != models.load_tokenizer(other).get_vocab():
        raise AnalysisError(f"{other_name} has a different tokenizer from {loaded_name} (same size, other tokens), "
                            f"so the same token ids would be different text; {ADVICE}.")
