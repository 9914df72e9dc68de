"""The associative-recall vocabulary as words, so a text harness (lm-evaluation-harness) can read recall sequences.

A recall model has no tokenizer: its ids are 0 (unused padding), keys 1..n_keys and values after them
(analysis.data.recall). Here key i is the word `k<i>` and value j the word `v<j>`, words are joined by single
spaces, and `tokenizer(task)` maps each word back to exactly its id, so "k3 v17" is [3, n_keys + 17].
"""
from __future__ import annotations

from analysis.data.recall import RecallTask

PAD = "<|endoftext|>"   # id 0: the padding id the task never uses, also bos/eos/pad for the harness


def words(task: RecallTask) -> list[str]:
    """The word of every id, in id order."""
    return [PAD] + [f"k{i}" for i in range(1, task.n_keys + 1)] + [f"v{j}" for j in range(1, task.n_values + 1)]


def to_text(ids, task: RecallTask) -> str:
    """Recall ids (a sequence of ints) as space-separated words."""
    vocab = words(task)
    return " ".join(vocab[int(i)] for i in ids)


def tokenizer(task: RecallTask):
    """A transformers fast tokenizer whose ids are the recall task's ids (whitespace-split words, no unknowns
    beyond the vocabulary: an unknown word becomes id 0, which the task never uses)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {w: i for i, w in enumerate(words(task))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=PAD, eos_token=PAD, pad_token=PAD,
                                  unk_token=PAD, model_max_length=task.seq_len)
    tok.name_or_path = f"recall-words-{task.n_keys}-keys"
    return tok
