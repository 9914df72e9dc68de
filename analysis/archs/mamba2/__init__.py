"""Mamba-2 hybrids (Mamba-2 SSD + attention): its adapter (`ADAPTER`), pruned model types and routing."""
from analysis.archs.mamba2.adapter import ADAPTER  # noqa: F401  (the registry imports the family by its folder)
