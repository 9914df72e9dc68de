"""Head pruning: whole value heads (and the key heads they read) removed from each linear layer.

prune: plan per-layer head counts, choose the heads, build the new model (with key channels too, in one build);
strategies: the registry of head scores (rank, norm, rank-norm, random, measured); sensitivity: each head removed
alone, its paired loss; importance: every strategy's scores and kept heads side by side.
"""
