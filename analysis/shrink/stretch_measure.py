"""A plan measured on one stretch of text of a given role (analysis.data.roles): choice or held-out tokens.

Every measurement goes through the one point cache (model identity, device, dtype, the stretch, strategy, seed,
calibration settings, dims), with each window's mean loss kept, so two plans measured on the same stretch are
compared pairwise (paired standard error over windows) and a plan measured once (by Verify, the calibration or
the recommendation evidence) is never measured again.
"""
from __future__ import annotations

import copy
import math
from contextlib import nullcontext

from analysis.data.roles import TokenStretch
from analysis.evaluate.perplexity import paired_difference
from analysis.io import point_cache
from analysis.io.points import IN_PROCESS, Executor, Point, run_points
from analysis.io.point_identity import model_identity
from analysis.models.prefix import PrefixCache
from analysis.shrink.prune_workflow import Evaluation, prune_then_measure

FIELDS = {"value": point_cache.NUMBER, "tokens": point_cache.INT, "windows": point_cache.NUMBER_LIST}


class StretchMeasure:
    """Perplexity of the unpruned model and of pruned plans on one stretch (per-window losses kept)."""

    def __init__(self, model, tokenizer, stretch: TokenStretch, strategy: str, calib: dict, *, seed: int = 0,
                 cancel=None, use_cache: bool = True):
        self.model, self.tokenizer, self.stretch, self.strategy = model, tokenizer, stretch, strategy
        self.seed, self.cancel, self.use_cache = seed, cancel, use_cache
        self.known: dict = {}  # measured by `measure_all`: dims (None: unpruned) → result
        if use_cache:
            point_cache.check_writable()
        param = next(model.parameters())
        self.key = {"kind": "stretch", "model": model_identity(model), "device": str(param.device),
                    "dtype": str(param.dtype), **stretch.as_dict(), "seed": seed, **calib}
        self.evaluation = Evaluation(stretch.split, stretch.context, stretch.tokens, latency=False, per_window=True,
                                     start=stretch.start)
        # plans measured here read the same tokens: each starts at its first changed layer (exact); the kept
        # hidden states come from measuring the unpruned model (a cached unpruned point leaves plans whole)
        self.prefix = PrefixCache(model)

    def _read(self, got: dict) -> dict:
        ppl = got["perplexity"]
        return {"value": ppl["perplexity"], "tokens": ppl["tokens"], "windows": ppl["window_losses"]}

    def unpruned(self) -> dict:
        if None in self.known:
            return self.known[None]
        return point_cache.cached(self._key(None), self.use_cache, lambda: _stretch_point(self, None, None, self.cancel),
                                  FIELDS)

    def plan(self, dims: list[int], calibration=None) -> dict:
        """calibration: a zero-argument callable giving the calibration (called only when the plan is computed)."""
        if tuple(dims) in self.known:
            return self.known[tuple(dims)]
        return point_cache.cached(self._key(dims), self.use_cache,
                                  lambda: _stretch_point(self, calibration() if calibration else None, dims,
                                                         self.cancel), FIELDS)

    def _key(self, dims) -> dict:
        return {**self.key, "point": "unpruned"} if dims is None else \
            {**self.key, "strategy": self.strategy, "dims": list(dims)}

    def measure_all(self, plans: list, calibration=None, executor: Executor = IN_PROCESS):
        """Yield (dims, result) for the unpruned model (dims None) and each plan's dims, through the point executor
        (analysis.io.points: in order in-process, as they finish on Ray), each kept so `unpruned`/`plan` answer
        at once. The calibration is drawn only when a plan is computed, not served from the cache."""
        todo = list(dict.fromkeys(None if d is None else tuple(d) for d in plans))
        points = [Point(self._key(d), FIELDS, None, (None if d is None else list(d),)) for d in todo]

        def shared(missing):
            plans_missing = any(p.args[0] is not None for p in missing)
            travelling = copy.copy(self)  # the cancel token stays here (run_points passes it in-process)
            travelling.cancel, travelling.known = None, {}
            if executor.on_ray:  # a worker measures whole: kept hidden states stay in this process
                travelling.prefix = None
            return travelling, calibration() if calibration and plans_missing else None
        device = str(next(self.model.parameters()).device)
        for i, result in run_points(_stretch_point, points, shared, executor=executor, device=device,
                                    use_cache=self.use_cache, cancel=self.cancel):
            self.known[todo[i]] = result
            yield todo[i], result

    def loss_vs_unpruned(self, dims: list[int], calibration=None) -> dict:
        """Δ log perplexity of a plan against the unpruned model on this stretch, ± its paired SE over windows."""
        base, got = self.unpruned(), self.plan(dims, calibration)
        d = paired_difference(base["windows"], got["windows"])
        return {"delta": math.log(got["value"] / base["value"]), "se": d["se"], "windows": d["windows"], "tokens": got["tokens"],
                "value": got["value"], "baseline_value": base["value"], "per_window": got["windows"]}


def _stretch_point(measure: StretchMeasure, calib, dims, cancel=None) -> dict:
    """The unpruned model (dims None) or one plan pruned and measured on the stretch: here or on a Ray worker."""
    if dims is None:
        with measure.prefix.active() if measure.prefix is not None else nullcontext():
            return measure._read(measure.evaluation.measure(measure.model, measure.tokenizer, cancel=cancel))
    run = prune_then_measure(measure.model, measure.tokenizer, measure.strategy, list(dims), calib,
                             measure.evaluation, seed=measure.seed, cancel=cancel, prefix=measure.prefix)
    return measure._read(run.measured)
