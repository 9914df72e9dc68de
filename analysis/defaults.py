"""Choices and defaults that the CLI's parser shows, free of torch so that `--help` stays fast.

The modules that use them (analysis.shrink.prune, analysis.shrink.sensitivity, analysis.shrink.heads.strategies) import
them from here.
"""
RESCALES = {"original": "original readout scale dk^-1/2 (pure channel removal)",
            "default": "fla's default readout scale dk'^-1/2 (the reference code's behaviour)"}
SENSITIVITY_RATIOS = (0.25, 0.5, 0.75, 0.875)   # the shipped maps' ratios (dk 64 → 48, 32, 16, 8)
SENSITIVITY_EVAL_TOKENS = 4096
HEAD_STRATEGY_NAMES = ("rank-norm", "rank", "norm", "random", "measured")   # analysis.shrink.heads.strategies, in order
DEFAULT_HEAD_STRATEGY = "rank-norm"
RANDOM_IDS = "random-ids"   # `heads --texts`: uniform random token ids (an input unlike any training text)
HEAD_TEXTS = ("test", "wiki", RANDOM_IDS)   # `heads --texts` default: Shakespeare test, Wikipedia slice, random ids
