"""One model in a side-by-side ("Compare with"): what the pages that show two models in columns know of each.
Made by ui.compare (the loaded model and the one picked beside it); States & rank and Query noise draw it."""
from __future__ import annotations

from dataclasses import dataclass

from analysis.models import load as models


@dataclass(frozen=True)
class Side:
    """One model in a side-by-side: `id` is "" for the loaded model, else the comparison's cache identity."""
    id: str
    name: str
    role: str            # "original", "pruned" (other key dims), "recovered" (pruned, then fine-tuned) or
                         # "comparison" (the same key dims)
    model: object        # never mutated
    info: models.ArchitectureInfo

    @property
    def dims(self) -> str:
        """'dk 64', or 'dk per layer 64, 32, 48, 64' when the layers differ."""
        dims = self.info.head_k_dims
        return f"dk {dims[0]}" if len(set(dims)) == 1 else f"dk per layer {', '.join(map(str, dims))}"

    @property
    def title(self) -> str:
        return f"{self.role}: {self.name}, {self.dims}"

    def at_layer(self, layer: int) -> str:
        """'original: deltanet-small, dk 64' / 'pruned: …, dk′ 16': the model and its key dim in that layer."""
        return f"{self.role}: {self.name}, dk{'' if not self.id else '′'} {self.info.head_k_dims[layer]}"
