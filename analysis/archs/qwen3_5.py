"""transformers' Qwen3.5 / Qwen3.5-MoE / Qwen3-Next text models: Gated DeltaNet blocks + softmax attention."""
from __future__ import annotations

from analysis.archs.base import Adapter


class Qwen35Adapter(Adapter):
    family = "qwen3_5"
    label = "Qwen3.5 Gated DeltaNet hybrid"

    def install_routing(self) -> None:
        from analysis.archs import qwen3_5_routing
        qwen3_5_routing.install()


ADAPTER = Qwen35Adapter()
