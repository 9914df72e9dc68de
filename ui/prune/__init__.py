"""The Prune page: its form, the prune and recovery jobs, save, the sensitivity map, Verify and choose, the
allocator's per-layer ratios and the history of plans."""
