"""Measuring a model: perplexity, recall accuracy, kernel and model latency, before/after measurement."""
