"""Device routing for transformers' Kimi Linear KDA layers: its two entry points take the gated delta rule's
arguments, so they are routed like Qwen3.5's (`analysis.archs.hf_routing.by_device_named`)."""
from __future__ import annotations

from analysis.archs.hf_routing import by_device_named, route_modules

MODELING = "transformers.models.kimi_linear.modeling_kimi_linear"
ENTRY_POINTS = ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention")


def install(recurrence) -> bool:
    """Route the entry points by device to `recurrence` (idempotent); False on an older transformers without Kimi
    Linear."""
    return bool(route_modules((MODELING,), ENTRY_POINTS, by_device_named(recurrence)))
