"""DeltaNet: its adapter (`ADAPTER`), pruned model types and routing."""
from analysis.archs.delta_net.adapter import ADAPTER  # noqa: F401  (the registry imports the family by its folder)
