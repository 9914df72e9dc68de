"""The per-layer ratio inputs of the Prune page, remembered per model (ui.state scope = the model's path):
the Suggest, Allocate and Verify buttons fill them; a model never shows another model's plan."""
from __future__ import annotations

from ui import state
from ui.keys import ModelKey


def name(layer: int) -> str:
    return f"layer_ratio_{layer}"


def scope(key: ModelKey) -> str:
    return key.path


def fill(ratios, key: ModelKey) -> None:
    """Put a plan into the inputs (from a button callback, before the page draws them)."""
    for layer, rho in enumerate(ratios):
        state.choose(name(layer), round(rho, 4), scope(key))


def held(n_layers: int, key: ModelKey) -> list:
    return [state.get(name(i), scope=scope(key)) for i in range(n_layers)]
