"""Kimi Linear (Kimi Delta Attention + MLA): its adapter (`ADAPTER`), pruned model types and routing."""
from analysis.archs.kimi_linear.adapter import ADAPTER  # noqa: F401  (the registry imports the family by its folder)
