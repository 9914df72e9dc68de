"""Inputs: the bundled corpus and tokenizer, which split plays which role (held-out), user text turned into labelled
batches, synthetic recall."""
