"""RWKV-7: its adapter (`ADAPTER`), pruned model types and routing."""
from analysis.archs.rwkv7.adapter import ADAPTER  # noqa: F401  (the registry imports the family by its folder)
