"""Streamlit-side caches and controls shared by the Shrink pages (importance, prune, sweep).

Calibration is computed once per (model, settings) and shared by every session, like the model itself
(ui.shared.memo, so its first run can show per-layer progress; read-only afterwards: the strategies only read it). Work on the shared model
runs under ui.shared.cache.compute_lock; pruning always builds a new model, so the shared one never changes.
A job's thread never calls Streamlit: the page resolves `using(key)` and `fn.bind(...)` in its script run
and the thread works with those plain objects.
"""
from __future__ import annotations

from typing import NamedTuple

import streamlit as st

from analysis.archs import adapter_for
from analysis.shrink.calibration import Calibration, CalibrationSettings
from analysis.shrink.importance import strategy_importance as strategy_importance_core
from analysis.shrink.prune_workflow import Evaluation, recall_pairs as core_recall_pairs
from analysis.shrink.prune import RESCALES
from analysis.shrink.sensitivity import calibration_profile_ids, layer_profile, profile_label
from analysis.shrink.strategies import STRATEGIES
from ui.shared import cache, memo, state
from ui.shared import progress as progress_ui
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.keys import ModelKey
from ui.shared.labels import readout_label

CALIB_BATCH = 8  # analysis.shrink.calibration runs its sequences 8 at a time: one forward pass each
CALIBRATION_USE = (
    "Random and L1 use no data. Wanda (feature RMS of the attention input), gradient (one backward pass for "
    "|W ⊙ ∇W L|, every sequence weighted equally), PCA (key covariance) and DRRQR (post-convolution q/k "
    "activations, at most 5,000 rows per head) use these windows: 16 × 256 tokens by default; raise them here "
    "for the strategy you run.")


class Using(NamedTuple):
    """The shared objects work on a model needs, resolved in a script run (st caches) for a job's thread."""
    model: object
    tokenizer: object  # None for a recall model
    lock: object       # ui.shared.cache.compute_lock()


def using(key: ModelKey) -> Using:
    tok = None if cache.recall_task(key) is not None else cache.tokenizer(key.path)
    return Using(cache.shared_model(key), tok, cache.compute_lock())


def strategy_label(name: str | None) -> str:
    """A channel strategy's label; a head-only prune (no channel strategy) says so."""
    return STRATEGIES[name].label if name in STRATEGIES else "no key channels removed"


def calibration_controls(ctx: Context) -> CalibrationSettings:
    """Calibration size (train split only), remembered across the Shrink pages so they share one cache entry."""
    with st.expander("Calibration (train split)" if ctx.task is None else "Calibration (synthetic recall sequences)"):
        c1, c2, c3 = st.columns(3)
        n = state.field(c1.number_input, "Calibration sequences", "calib_sequences", 16, 1, 256, step=1)
        if ctx.task is None:
            t = state.field(c2.number_input, "Tokens per sequence", "calib_tokens", 256, 16, 4096, step=64)
        else:
            t = ctx.task.seq_len
            c2.caption(f"Recall sequences are {t} tokens long (fixed by the task).")
        seed = state.field(c3.number_input, "Seed", "calib_seed", 0, 0, 10**6, step=1)
        st.caption(CALIBRATION_USE if ctx.task is None else
                   "Random and L1 use no data; the other strategies use these synthetic recall sequences.")
    return CalibrationSettings(int(n), int(t), int(seed))


def rescale_control(ctx: Context) -> str:
    """Readout scale of the pruned layers: the original (pure channel removal) unless asked otherwise. A family
    whose readout has no scale (adapter.readout_scaled False) gets no control: there is nothing to choose."""
    if not adapter_for(ctx.model).readout_scaled:
        return "original"
    names = list(RESCALES)
    return state.field(st.radio, "Readout scale", "prune_rescale", "original", options=names, horizontal=True,
                       format_func=readout_label,
                       help="The original 1/√dₖ makes the pruned model the original one with the dropped channels "
                            "zeroed. fla's default 1/√dₖ′ is what the reference code does; it changes the output "
                            "beyond the lost channels.")


@memo.memoized("calibration", max_entries=4)
def calibration(key: ModelKey, settings: CalibrationSettings, *, progress: progress_ui.Report, _using: Using | None = None,
                cancel=None) -> Calibration:
    """Train-split statistics (recall models: synthetic sequences, a seed apart from the evaluation's).

    Computed once per (model, settings) for the whole process and shared read-only by Channel importance,
    Prune and Sweep; the first run reports each layer of each forward pass to `progress`.
    """
    model, tokenizer, lock = _using or using(key)  # a job passes them resolved (its thread never calls st)
    passes = -(-settings.sequences // CALIB_BATCH)
    progress(0.0, "drawing the calibration sequences")
    with lock, progress_ui.per_layer(model, progress, "activations entering the recurrence", passes=passes):
        return settings.calibrate(model, tokenizer, cancel=cancel)  # the core picks the input


@memo.memoized("calibration_gradients", max_entries=4)
def gradients(key: ModelKey, settings: CalibrationSettings, *, progress: progress_ui.Report) -> list:
    """The backward pass behind the gradient (Taylor) scores, once per calibration."""
    calib = calibration(key, settings)
    with cache.compute_lock():
        return calib.gradients()


def shared_calibration(key: ModelKey, sequences: int, seed: int = 0, progress: progress_ui.Report | None = None):
    """For analysis.runs.sweep(calibration=...): the very Calibration Channel importance and Prune use for these
    settings (train split, 256 tokens per sequence, as the sweep's own default), computed at most once
    (reporting each pass and layer to `progress` when it is computed). Resolved here, in the script run: the
    callable it returns (which also takes `progress` and a `cancel` token) is safe in a job's thread."""
    run = calibration.bind(key, CalibrationSettings(int(sequences), 256, int(seed)), _using=using(key))
    return lambda progress=progress, cancel=None: run(progress=progress, cancel=cancel)


def prepare(key: ModelKey, settings: CalibrationSettings, need_gradients: bool) -> Calibration:
    """Calibration (and gradients when asked). The first time, a status box names the pass and layer running
    and lists the steps with their times; afterwards it just says the calibration is ready."""
    if calibration.is_cached(key, settings) and (not need_gradients or gradients.is_cached(key, settings)):
        calib = calibration(key, settings)
        st.status(f"Calibration ready: {calib.label}", state="complete", expanded=False)
        return calib
    task = cache.recall_task(key)
    steps = progress_ui.Steps(f"Calibrating on {settings.sequences} sequences × {settings.tokens} tokens of the "
                              "train split…" if task is None else
                              f"Calibrating on {settings.sequences} synthetic recall sequences × {task.seq_len} tokens…")
    try:
        forward = progress_ui.span(lambda f, text: steps(f, f"forward pass, {text}"), 0.0,
                                   0.5 if need_gradients else 1.0)
        calib = calibration(key, settings, progress=forward)
        if need_gradients:
            steps(0.5, "backward pass: gradients of the query/key projections for the Taylor scores (all layers at once)")
            gradients(key, settings)
    except Exception:
        steps.box.update(state="error", expanded=False)
        raise
    steps.done(f"Calibration ready: {calib.label}")
    return calib


@memo.memoized("strategy_importance", max_entries=32)
def strategy_importance(key: ModelKey, settings: CalibrationSettings | None, name: str, ratio: float, seed: int, *,
                        progress: progress_ui.Report) -> dict:
    """One strategy's scores and kept sets (analysis.shrink.importance.strategy_importance): `settings` None for a
    strategy that needs no data, so it is drawn before any calibration runs and shared across calibration sizes."""
    calib = None if settings is None else calibration(key, settings)
    if settings is not None and STRATEGIES[name].needs_gradients:
        gradients(key, settings)
    progress(0.0, f"scoring the channels: {STRATEGIES[name].label}")
    with cache.compute_lock():
        return strategy_importance_core(cache.shared_model(key), calib, name, ratio, seed)


def recall_pairs(ctx: Context) -> tuple[int, ...] | None:
    """Pair counts to score a recall model on (None for a language model)."""
    return core_recall_pairs(ctx.task)


@memo.memoized("baseline", max_entries=16)
def baseline(key: ModelKey, evaluation: Evaluation, *, progress: progress_ui.Report, _using: Using | None = None,
             cancel=None) -> dict:
    """The unpruned model measured once per evaluation setting (the Prune page's, as prune_and_measure measures the
    pruned one); shared: callers must not mutate it."""
    model, tok, lock = _using or using(key)
    with lock:
        return evaluation.measure(model, tok, cancel=cancel,
                                  progress=lambda f: progress(f, f"perplexity of the unpruned model: {f:.0%}"))


@memo.memoized("rank_profile", max_entries=8)
def _profile(key: ModelKey, settings: CalibrationSettings, *, progress: progress_ui.Report, _using: Using | None = None,
             _task=None) -> list[dict]:
    model, tok, lock = _using or using(key)
    progress(0.0, "states of the first calibration sequences")
    ids = calibration_profile_ids(tok, settings, _task)
    with lock:
        return layer_profile(model, ids)


def rank_profile(ctx: Context, settings: CalibrationSettings) -> list[dict]:
    """The one rank profile of a model and calibration settings (per layer: dk, heads, state bytes, rank
    utilization), computed once per process; Suggest from rank, the sensitivity map and Verify all read it."""
    args = (ctx.key, settings)
    with guard(), progress_ui.first_time(_profile.is_cached(*args), f"Measuring the rank profile of {ctx.name}…",
                                         f"Rank profile of {ctx.name} measured") as report:
        return _profile(*args, progress=report, _using=using(ctx.key), _task=ctx.task)


def profile_caption(ctx: Context, settings: CalibrationSettings) -> str:
    return profile_label(settings, ctx.task)


def locked(generator, lock=None):
    """Advance a core generator one step at a time under the compute lock (other sessions run between steps).
    The lock is resolved here, in the script run; a job passes `using(key).lock`."""
    return _stepped(generator, lock if lock is not None else cache.compute_lock())


def _stepped(generator, lock):
    while True:
        with lock:
            try:
                item = next(generator)
            except StopIteration:
                return
        yield item
