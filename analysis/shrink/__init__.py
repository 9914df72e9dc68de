"""Making a model smaller: calibration, channel strategies, importance, prune (and heads/: whole heads), the one
prune-then-measure entry and its PruneRun, recovery, the sensitivity map, allocation and plan prediction."""
