"""Inputs: the bundled corpus and tokenizer, user text turned into labelled batches, synthetic recall."""
