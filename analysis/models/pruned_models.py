"""The project's registered per-layer-key-dim model types (fla's live in analysis.archs.fla_pruned).

Importing this module registers them with transformers' Auto classes, so saved pruned models load with
`AutoModelForCausalLM.from_pretrained` after `analysis.ready()`.
"""
from analysis.archs.fla_pruned import (PrunedDeltaNetConfig,  # noqa: F401
                                       PrunedDeltaNetForCausalLM, PrunedGatedDeltaNetConfig,
                                       PrunedGatedDeltaNetForCausalLM, keep_readout_scale, set_key_dim)
