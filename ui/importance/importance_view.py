"""Channel importance's score charts, drawn strategy by strategy as each one is done: the strategies that need no
data first (no calibration to wait for), then the calibration, then the others (the gradient last: it adds a
backward pass). The kept-set comparisons need every strategy and the calibration, so they come after."""
from __future__ import annotations

import streamlit as st

from analysis.shrink.importance import combined
from analysis.shrink.strategies import STRATEGIES
from ui.shared import cache, shrink, shrink_figures
from ui.shared.context import Context
from ui.shared.progress import first_time


def work_order(chosen: list[str]) -> list[str]:
    """Cheapest first: data-free strategies, then those reading the calibration, then those needing gradients."""
    return sorted(chosen, key=lambda n: (STRATEGIES[n].needs_calibration, STRATEGIES[n].needs_gradients))


def score_charts(ctx: Context, settings: shrink.CalibrationSettings, chosen: list[str], ratio: float, layer: int,
                 head: int) -> dict:
    """One score chart per chosen strategy (in the chosen order on screen), each drawn as soon as it is scored;
    returns the whole report (analysis.shrink.importance.combined) with the calibration it used."""
    columns = st.columns(min(3, len(chosen)))
    slots = {name: columns[i % len(columns)].empty() for i, name in enumerate(chosen)}
    for name in chosen:
        wait = "waiting for the calibration" if STRATEGIES[name].needs_calibration else "next"
        slots[name].info(f"{shrink.strategy_label(name)}: {wait}…")
    done, calib = {}, None
    need_gradients = any(STRATEGIES[n].needs_gradients for n in chosen)
    for name in work_order(chosen):
        uses = settings if STRATEGIES[name].needs_calibration else None
        if uses is not None and calib is None:
            calib = shrink.prepare(ctx.key, settings, need_gradients)
        args = (ctx.key, uses, name, float(ratio), settings.seed)
        with first_time(shrink.strategy_importance.is_cached(*args), f"Scoring {shrink.strategy_label(name)}…",
                        f"{shrink.strategy_label(name)} scored") as steps:
            done[name] = shrink.strategy_importance(*args, progress=steps)
        draw(slots[name], done[name], layer, head)
    if calib is None:  # only data-free strategies: the kept energy still reads the calibration's activations
        calib = shrink.prepare(ctx.key, settings, False)
    with cache.compute_lock():
        return combined(ctx.model, calib, {n: done[n] for n in chosen}, float(ratio))


def draw(slot, one: dict, layer: int, head: int) -> None:
    name = one["name"]
    kept = one["kept"][layer][head] if one["kept"] is not None else [one["head_k_dims"][layer]]
    strategy = STRATEGIES[name]
    slot.plotly_chart(shrink_figures.score_bars(one["scores"][layer][head], kept, strategy.label, strategy.label,
                                                strategy.score_unit, strategy.axis_aligned), key=f"scores_{name}")
