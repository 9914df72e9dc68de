"""Qwen3.5 / Qwen3-Next / OLMo-hybrid: its adapter (`ADAPTER`), pruned model types and routing."""
from analysis.archs.qwen3_5.adapter import ADAPTER  # noqa: F401  (the registry imports the family by its folder)
