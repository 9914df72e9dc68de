"""Train the bundled byte-level BPE tokenizer (8192 ids) on the Shakespeare train split only.

Needs the project's venv (tokenizers, transformers); no network:

    .venv/bin/python sample_models/data/build_tokenizer.py

Writes sample_models/tokenizer/ with `save_pretrained`, so `AutoTokenizer.from_pretrained(
"sample_models/tokenizer")` loads it offline. Byte-level BPE without prefix space: decoding gives
the input back byte for byte. `<|endoftext|>` (id 0) is bos/eos and the document separator; no unk.
"""
from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tokenizer"
EOT = "<|endoftext|>"
SEPARATOR = f"\n\n{EOT}\n\n"  # as written by build_data.py
VOCAB_SIZE = 8192
SPLITS = {"train": "shakespeare_train", "validation": "shakespeare_validation",
          "test": "shakespeare_test", "wiki": "wiki"}


def read(name: str) -> str:
    return gzip.decompress((HERE / f"{name}.txt.gz").read_bytes()).decode("utf-8")


def train(text: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())  # byte-level: every byte is in the alphabet, so no unk
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # Train on the works themselves; the separator is a special token, never merged into text.
    tok.train_from_iterator(text.split(SEPARATOR), trainer=trainer)
    return tok


def main() -> None:
    tok = train(read("shakespeare_train"))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT,
                                   clean_up_tokenization_spaces=False, model_max_length=10**12)
    OUT.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(OUT)
    assert len(fast) == VOCAB_SIZE, len(fast)
    for split, name in SPLITS.items():
        text = read(name)
        ids = fast(text, add_special_tokens=False)["input_ids"]
        assert fast.decode(ids) == text, f"{split}: decode does not round-trip"
        n_bytes = len(text.encode("utf-8"))
        print(f"{split:10s} {n_bytes:>9d} bytes {len(ids):>9d} tokens {n_bytes / len(ids):.3f} bytes/token")
    for f in sorted(OUT.iterdir()):
        print(f"{f.name} sha256 {hashlib.sha256(f.read_bytes()).hexdigest()} ({f.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
