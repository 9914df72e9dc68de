"""Making a model smaller: calibration, strategies, importance, prune, recovery, sensitivity, allocation."""
