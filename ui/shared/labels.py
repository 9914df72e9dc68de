"""Axis titles, units and the provenance caption that goes under every chart (pure, no streamlit)."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

# Units for the metric axis; the ranks count singular directions, the norms are in the state's own units.
METRIC_UNITS = {
    "stable_rank": "directions",
    "rank_utilization": "fraction of min(dk, dv)",
    "effective_rank": "directions",
    "participation_ratio": "directions",
    "numerical_rank": "directions",
    "energy_rank": "directions",
    "condition_number": "ratio s1 / s_r",
    "fro_norm": "state units",
    "spectral_norm": "state units",
}


def metric_title(key: str) -> str:
    """'Stable rank (directions)': the METRIC_INFO label with its unit."""
    from analysis.linalg.rank import METRIC_INFO  # light module; keeps this file importable without fla at import time
    label = METRIC_INFO[key].label if key in METRIC_INFO else key
    unit = METRIC_UNITS.get(key)
    return f"{label} ({unit})" if unit else label


# The readout-scale choices (analysis.defaults.RESCALES) as a page shows them: 1/√dₖ, not plain-text "dk^-1/2"
READOUT_LABELS = {"original": "original readout scale 1/√dₖ (pure channel removal)",
                  "default": "fla's default readout scale 1/√dₖ′ (the reference code's behaviour)"}


NO_READOUT_SCALE = "no readout scale in this family (o = Sᵀq): pure channel removal"


def readout_label(rescale: str, scaled: bool = True) -> str:
    """The readout a prune used; `scaled` False for a family whose readout has no scale (nothing to choose)."""
    return READOUT_LABELS.get(rescale, rescale) if scaled else NO_READOUT_SCALE


def weights_name(model_path: str) -> str:
    """What to call the loaded model beside its random-init copy: "trained" only when we know it was (a
    training.json from `python -m analysis train`, or a hub download); a bare local directory may hold
    random-init weights too, so it is "loaded weights"."""
    path = Path(model_path)
    if (path / "training.json").is_file() or "models--" in path.as_posix():  # hub cache: models--org--name
        return "trained"
    return "loaded weights"


class Provenance(NamedTuple):
    """Where a number came from: shown under each chart so no value travels without its context."""
    model: str
    dataset: str
    tokens: int
    sequences: int
    device: str
    dtype: str


def caption(p: Provenance, extra: str = "") -> str:
    line = (f"{p.model} · {p.dataset} · context {p.tokens} tokens × {p.sequences} sequences · "
            f"device {p.device} · dtype {p.dtype}")
    return f"{line} · {extra}" if extra else line
