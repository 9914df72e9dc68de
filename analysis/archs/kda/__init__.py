"""Kimi Delta Attention: its adapter (`ADAPTER`), pruned model types and routing."""
from analysis.archs.kda.adapter import ADAPTER  # noqa: F401  (the registry imports the family by its folder)
