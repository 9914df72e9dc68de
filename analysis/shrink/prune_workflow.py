"""Prune-then-measure, prune-and-measure and recover-and-measure: the one workflow of each action.

`prune_then_measure` is the one entry that prunes a new model and measures it: the CLI's `prune` and the Prune page
(through `prune_and_measure`, which adds the unpruned model's measurement), the sweep's points, the sensitivity
map's points, the allocator's `verify` and Verify-and-choose all call it, each with its own
analysis.evaluate.measure.Evaluation, through which every measurement goes. The unpruned model's measurement may be passed in (the page caches it per
setting); otherwise it is measured here with the same settings as the pruned one.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from analysis.runtime.cancel import check
from analysis.errors import AnalysisError
from analysis.evaluate.measure import Evaluation
from analysis.shrink.prune import PruneResult, prune

RECALL_PAIRS = (4, 8, 16, 32)  # pair counts for recall accuracy (those above the task's key count are skipped)


def recall_pairs(task) -> tuple[int, ...] | None:
    """Pair counts a recall model is scored on (its own trained count included); None for a language model."""
    if task is None:
        return None
    return tuple(sorted({p for p in RECALL_PAIRS if p <= task.n_keys} | {task.n_pairs}))


@dataclass
class Measured:
    pruned: PruneResult   # the new model (the input model is never changed) and its plan
    measured: dict        # analysis.evaluate.measure.measure of the new model


@dataclass
class Pruned:
    pruned: PruneResult   # the new model (the input model is never changed) and its plan
    before: dict          # analysis.evaluate.measure.measure of the unpruned model
    after: dict           # ... of the pruned one, with the same settings


@dataclass
class Recovered:
    recovery: object      # analysis.shrink.recovery.RecoveryResult (its .model is the recovered model)
    measured: dict        # analysis.evaluate.measure.measure of the recovered model


def _span(progress, lo: float, hi: float, text: str):
    """A measure-style progress(f) mapped onto [lo, hi] of the workflow's progress(f, text)."""
    if progress is None:
        return None
    return lambda f: progress(lo + (hi - lo) * f, f"{text}: {f:.0%}")


def prune_then_measure(model, tokenizer, strategy: str | None, dims: list[int], calibration, evaluation: Evaluation,
                       *, seed: int = 0, rescale: str = "original", heads=None, lock=None, cancel=None,
                       progress=None, prefix=None) -> Measured:
    """Prune `model` to `dims` with `strategy` into a new model and measure it with `evaluation`: the one entry.

    heads: an analysis.shrink.heads.prune.HeadPlan that also removes whole heads (strategy may then be None when
    `dims` keeps every key channel). lock: held while the (possibly shared) unpruned model is read; the new model
    is this call's own. progress(fraction) of the measurement. prefix: an analysis.models.prefix.PrefixCache of
    the unpruned model, for a set of points on the same tokens (the measurement starts at the first changed layer)."""
    evaluation = evaluation.loaded()
    result = pruned(model, strategy, dims, calibration, seed=seed, rescale=rescale, heads=heads, lock=lock)
    check(cancel)
    from analysis.models.prefix import scope
    with scope(prefix):
        return Measured(result, evaluation.measure(result.model, tokenizer, progress, cancel))


def pruned(model, strategy: str | None, dims: list[int], calibration, *, seed: int = 0, rescale: str = "original",
           heads=None, lock=None):
    """The prune of prune_then_measure alone (a caller that measures otherwise, e.g. `eval --plans` on tasks):
    a new model, `model` untouched; lock held while it is read."""
    with lock if lock is not None else nullcontext():
        if heads is None:
            result = prune(model, strategy, dims, calibration, seed=seed, rescale=rescale)
        else:
            from analysis.shrink.heads.prune import prune_with_heads
            result = prune_with_heads(model, strategy, dims, heads, calibration, seed=seed, rescale=rescale)
    # recall models find their task beside the source; the pruned copy reads the same one
    result.model.analysis_source = getattr(model, "analysis_source", None)
    return result


def prune_and_measure(model, tokenizer, strategy: str | None, dims: list[int], calibration, evaluation: Evaluation, *,
                      seed: int = 0, rescale: str = "original", before=None, lock=None, cancel=None,
                      progress=None, heads=None) -> Pruned:
    """`prune_then_measure`, then the unpruned model measured with the same settings (the CLI's `prune`, the Prune
    page's job). The prune comes first, so a plan the model cannot take is refused before any measurement.

    before: None (measured here), a measure() dict, or a callable(progress=, cancel=) returning one (a cache).
    lock: held while the (possibly shared) unpruned model is read. progress(fraction, text)."""
    lock = lock if lock is not None else nullcontext()
    evaluation = evaluation.loaded()  # the tasks loaded once for both measurements
    if progress:
        progress(0.0, "choosing channels and building a new model (the input model is not changed)")
    run = prune_then_measure(model, tokenizer, strategy, dims, calibration, evaluation, seed=seed, rescale=rescale,
                             heads=heads, lock=lock, cancel=cancel,
                             progress=_span(progress, 0.1, 0.5, "measuring the pruned model"))
    if before is None:
        with lock:
            before = evaluation.measure(model, tokenizer, _span(progress, 0.5, 1.0, "measuring the unpruned model"),
                                        cancel)
    elif callable(before):
        if progress:
            progress(0.5, "measuring the unpruned model (cached per setting)")
        before = before(progress=(lambda f, text: progress(0.5 + 0.5 * f, text)) if progress else None,
                        cancel=cancel)
    return Pruned(run.pruned, before, run.measured)


def recover_and_measure(pruned_model, tokenizer, settings, evaluation: Evaluation, *, teacher=None, cancel=None,
                        progress=None, state_dir=None, resume=None, yes: bool = False, say=None,
                        measure_progress=None, state_context: dict | None = None) -> Recovered:
    """analysis.shrink.recovery.recover on the pruned model, then the recovered model measured with `evaluation`.

    Recovery trains on text, so a recall model is refused. The kernel is not timed again: recovery changes
    weights, not shapes, so the pruned model's kernel time stands. progress: recover()'s per-step events;
    measure_progress(fraction) for the measurement."""
    from analysis.shrink.recovery import recover
    if evaluation.recall_pairs is not None:
        raise AnalysisError("Recovery trains on text, and a recall model has no tokenizer; drop the recovery "
                            "steps (recovery is offered for language models).")
    evaluation = evaluation.loaded()  # bad task names are refused before the training steps
    rec = recover(pruned_model, tokenizer, settings, teacher=teacher, cancel=cancel, progress=progress,
                  state_dir=state_dir, resume=resume, yes=yes, say=say, state_context=state_context)
    rec.model.analysis_source = getattr(pruned_model, "analysis_source", None)
    measured = evaluation.measure(rec.model, tokenizer, measure_progress, cancel, latency=False)
    return Recovered(rec, measured)
