"""One vocabulary for "how many directions a state uses": the headline measure and a head's rank card.

The headline is the **effective rank** (Roy & Vetterli): exp of the entropy of the normalised singular values.
It reads the whole spectrum, needs no threshold, does not change when the state is scaled, and moves smoothly as a
direction fades. The other counts answer narrower questions and disagree with it by design, so they are shown
beside it on the rank card, each with its definition, never as "directions used" on their own:
- numerical rank #{s_i > τ s_1}: every direction above rounding (τ = 1e-3 counts faint ones too);
- energy rank at 99 %: the fewest directions holding 99 % of Σ s_i²;
- participation ratio (Σ s_i²)² / Σ s_i⁴: the energy-weighted count;
- stable rank Σ s_i² / s_1² = u · min(dk, dv): the energy measured against the strongest direction alone;
- #{s_i > s_1/10}: the directions within a factor 10 of the strongest.
Every figure is computed per state from its singular values, then averaged (as the maps average over sequences).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

HEADLINE = "effective_rank"  # a key of analysis.linalg.rank.METRIC_INFO
HEADLINE_NAME = "effective rank"
HEADLINE_WHY = ("the effective rank reads the whole spectrum, needs no threshold, ignores the state's scale and "
                "moves smoothly as a direction fades; the counts at a threshold jump with it, and the stable rank "
                "(u · m) weighs everything against s₁ alone")
ENERGY = 0.99      # the card's energy rank: the fewest directions holding 99 % of Σ s²
TENTH = 0.1        # the card's "strong directions": s_i > s_1 / 10


class Measure(NamedTuple):
    key: str
    name: str
    definition: str


def card_measures(tau: float) -> list[Measure]:
    """The card's rows in order, the headline first."""
    return [
        Measure("effective_rank", f"{HEADLINE_NAME} (headline)",
                "exp(−Σ pᵢ log pᵢ), pᵢ = sᵢ / Σⱼ sⱼ: the entropy count of the whole spectrum"),
        Measure("numerical_rank", f"numerical rank at τ = {tau:g}", f"#{{sᵢ > τ·s₁}}: every direction above τ = {tau:g}"),
        Measure("energy_rank", f"energy rank at {ENERGY:.0%}", f"fewest r with Σᵢ≤ᵣ sᵢ² ≥ {ENERGY:.0%} of Σ sᵢ²"),
        Measure("participation_ratio", "participation ratio", "(Σ sᵢ²)² / Σ sᵢ⁴: the energy-weighted count"),
        Measure("stable_rank", "stable rank = u · min(dk, dv)", "Σ sᵢ² / s₁²: the energy against the strongest direction"),
        Measure("strong", "count of s > s₁/10", "#{sᵢ > s₁/10}: directions within 10× of the strongest"),
    ]


def state_measures(s, tau: float) -> dict[str, float]:
    """The card's figures of one state from its singular values s (any order); all 0 for a zero state."""
    s = np.sort(np.abs(np.asarray(s, dtype=np.float64)))[::-1]
    if s.size == 0 or not np.isfinite(s).all():
        return {m.key: float("nan") for m in card_measures(tau)}
    if s[0] <= 0:
        return {m.key: 0.0 for m in card_measures(tau)}
    p = s / s.sum()
    nz = p[p > 0]
    energy = s ** 2
    cumulative = np.cumsum(energy) / energy.sum()
    return {"effective_rank": float(np.exp(-(nz * np.log(nz)).sum())),
            "numerical_rank": float((s > tau * s[0]).sum()),
            "energy_rank": float(np.searchsorted(cumulative, ENERGY - 1e-12) + 1),
            "participation_ratio": float(energy.sum() ** 2 / (energy ** 2).sum()),
            "stable_rank": float(energy.sum() / energy[0]),
            "strong": float((s > TENTH * s[0]).sum())}


def rank_card(spectra, tau: float) -> list[dict]:
    """Rows {"measure", "value", "definition"} for states whose singular values are the rows of `spectra`
    ([n, m], e.g. one head's final state in each sequence): each figure per state, then the mean."""
    per_state = [state_measures(s, tau) for s in np.atleast_2d(np.asarray(spectra, dtype=np.float64))]
    return [{"measure": m.name, "value": float(np.nanmean([d[m.key] for d in per_state])), "definition": m.definition}
            for m in card_measures(tau)]
