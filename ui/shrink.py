"""Streamlit-side caches and controls shared by the Shrink pages (importance, prune, sweep).

Calibration is computed once per (model, settings) and shared by every session, like the model itself
(cache_resource; read-only afterwards: the core's strategies only read it). Work on the shared model
runs under ui.cache.compute_lock; pruning always builds a new model, so the shared one never changes.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import streamlit as st
import torch

from analysis.calibration import Calibration, calibrate
from analysis.importance import importance_report
from analysis.measure import measure
from analysis.prune import RESCALES
from analysis.recall import recall_batch
from analysis.strategies import STRATEGIES
from ui import cache, state
from ui.context import Context, traced
from ui.keys import ModelKey

RECALL_PAIRS = (4, 8, 16, 32)  # pair counts for recall accuracy (those above the task's key count are skipped)
CALIBRATION_USE = (
    "Random and L1 use no data. Wanda (feature RMS of the attention input), gradient (one backward pass for "
    "|W ⊙ ∇W L|, every sequence weighted equally), PCA (key covariance) and DRRQR (post-convolution q/k "
    "activations, at most 5,000 rows per head) use these windows: 16 × 256 tokens by default; raise them here "
    "for the strategy you run.")


class CalibSettings(NamedTuple):
    sequences: int = 16
    tokens: int = 256
    seed: int = 0


def strategy_label(name: str) -> str:
    return STRATEGIES[name].label


def calibration_controls(ctx: Context) -> CalibSettings:
    """Calibration size (train split only), remembered across the Shrink pages so they share one cache entry."""
    with st.expander("Calibration (train split)" if ctx.task is None else "Calibration (synthetic recall sequences)"):
        c1, c2, c3 = st.columns(3)
        n = c1.number_input("Calibration sequences", 1, 256, key=state.remembered("calib_sequences", 16), step=1)
        state.remember("calib_sequences")
        if ctx.task is None:
            t = c2.number_input("Tokens per sequence", 16, 4096, key=state.remembered("calib_tokens", 256), step=64)
            state.remember("calib_tokens")
        else:
            t = ctx.task.seq_len
            c2.caption(f"Recall sequences are {t} tokens long (fixed by the task).")
        seed = c3.number_input("Seed", 0, 10**6, key=state.remembered("calib_seed", 0), step=1)
        state.remember("calib_seed")
        st.caption(CALIBRATION_USE if ctx.task is None else
                   "Random and L1 use no data; the other strategies use these synthetic recall sequences.")
    return CalibSettings(int(n), int(t), int(seed))


def rescale_control() -> str:
    """Readout scale of the pruned layers: the original (pure channel removal) unless asked otherwise."""
    names = list(RESCALES)
    choice = st.radio("Readout scale", names, horizontal=True, format_func=RESCALES.get,
                      key=state.remembered("prune_rescale", "original", names),
                      help="The original dk^-½ makes the pruned model the original one with the dropped channels "
                           "zeroed. fla's default dk'^-½ is what the reference code does; it changes the output "
                           "beyond the lost channels.")
    state.remember("prune_rescale")
    return choice


@st.cache_resource(max_entries=4, show_spinner=False)
def calibration(key: ModelKey, settings: CalibSettings) -> Calibration:
    """Train-split statistics (recall models: synthetic sequences, a seed apart from the evaluation's)."""
    model, task = cache.shared_model(key), cache.recall_task(key)
    with cache.compute_lock():
        if task is None:
            return calibrate(model, cache.tokenizer(key.path), settings.sequences, settings.tokens, settings.seed)
        ids, _ = recall_batch(task, settings.sequences, torch.Generator().manual_seed(settings.seed))
        calib = calibrate(model, None, input_ids=ids)
        calib.label = f"{ids.shape[0]}×{ids.shape[1]} tokens of synthetic recall sequences (seed {settings.seed})"
        return calib


@st.cache_resource(max_entries=4, show_spinner=False)
def gradients(key: ModelKey, settings: CalibSettings) -> list:
    """The backward pass behind the gradient (Taylor) scores, once per calibration."""
    with cache.compute_lock():
        return calibration(key, settings).gradients()


def prepare(key: ModelKey, settings: CalibSettings, need_gradients: bool) -> Calibration:
    """Calibration (and gradients when asked), with a status box that says which pass is running."""
    label = f"{settings.sequences} sequences × {settings.tokens} tokens"
    with st.status(f"Calibrating on {label} of the train split…", expanded=False) as box:
        bar = st.progress(0.0, text="forward pass: activations entering the recurrence")
        calib = calibration(key, settings)
        if need_gradients:
            bar.progress(0.5, text="backward pass: gradients of q_proj / k_proj for the Taylor scores")
            gradients(key, settings)
        bar.progress(1.0, text="done")
        box.update(label=f"Calibration ready: {calib.label}", state="complete")
    return calib


@st.cache_data(max_entries=16, show_spinner=False)
def importance(key: ModelKey, settings: CalibSettings, names: tuple, ratio: float) -> dict:
    """The core's importance report (scores, kept masks, Jaccard agreement, kept energy) as plain lists."""
    calib = calibration(key, settings)
    with cache.compute_lock():
        return importance_report(cache.shared_model(key), None, list(names), ratio, seed=settings.seed, calib=calib)


def recall_pairs(ctx: Context) -> tuple[int, ...] | None:
    """Pair counts to score a recall model on (None for a language model)."""
    if ctx.task is None:
        return None
    return tuple(sorted({p for p in RECALL_PAIRS if p <= ctx.task.n_keys} | {ctx.task.n_pairs}))


@st.cache_data(max_entries=16, show_spinner=False)
def baseline(key: ModelKey, context: int, max_tokens: int, pairs: tuple | None, recall_sequences: int,
             latency: bool) -> dict:
    """The unpruned model measured once per setting (test split)."""
    tok = None if pairs is not None else cache.tokenizer(key.path)
    with cache.compute_lock():
        return measure(cache.shared_model(key), tok, "test", context, max_tokens, recall_pairs=pairs,
                       recall_sequences=recall_sequences, latency=latency)


def rank_profile(ctx: Context) -> list[float]:
    """Per layer, rank utilization of the final state, mean over sequences and heads (the States page's trace)."""
    data = traced(ctx, int(state.get("stride", 8)))
    u = np.asarray(data["metrics"]["rank_utilization"])[..., -1]        # [L, B, H]
    with np.errstate(all="ignore"):
        return [float(np.nanmean(layer)) if np.isfinite(layer).any() else float("nan") for layer in u]


def locked(generator):
    """Advance a core generator one step at a time under the compute lock (other sessions run between steps)."""
    while True:
        with cache.compute_lock():
            try:
                item = next(generator)
            except StopIteration:
                return
        yield item
