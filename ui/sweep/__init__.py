"""The Sweep page: the perplexity sweep, the latency sweep and the equal-budget comparison."""
