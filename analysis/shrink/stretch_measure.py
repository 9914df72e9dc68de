"""A plan measured on one stretch of text of a given role (analysis.data.roles): choice or held-out tokens.

Every measurement goes through the one point cache (model identity, device, dtype, the stretch, strategy, seed,
calibration settings, dims), with each window's mean loss kept, so two plans measured on the same stretch are
compared pairwise (paired standard error over windows) and a plan measured once (by Verify, the calibration or
the recommendation evidence) is never measured again.
"""
from __future__ import annotations

import math

from analysis.data.roles import TokenStretch
from analysis.evaluate.perplexity import paired_difference
from analysis.io import point_cache
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
        return point_cache.cached({**self.key, "point": "unpruned"}, self.use_cache,
                                  self._measure_unpruned, FIELDS)

    def _measure_unpruned(self) -> dict:
        with self.prefix.active():
            return self._read(self.evaluation.measure(self.model, self.tokenizer, cancel=self.cancel))

    def plan(self, dims: list[int], calibration=None) -> dict:
        """calibration: a zero-argument callable giving the calibration (called only when the plan is computed)."""
        def compute():
            run = prune_then_measure(self.model, self.tokenizer, self.strategy, list(dims),
                                     calibration() if calibration else None, self.evaluation, seed=self.seed,
                                     cancel=self.cancel, prefix=self.prefix)
            return self._read(run.measured)
        return point_cache.cached({**self.key, "strategy": self.strategy, "dims": list(dims)}, self.use_cache,
                                  compute, FIELDS)

    def loss_vs_unpruned(self, dims: list[int], calibration=None) -> dict:
        """Δ log perplexity of a plan against the unpruned model on this stretch, ± its paired SE over windows."""
        base, got = self.unpruned(), self.plan(dims, calibration)
        d = paired_difference(base["windows"], got["windows"])
        return {"delta": math.log(got["value"] / base["value"]), "se": d["se"], "windows": d["windows"], "tokens": got["tokens"],
                "value": got["value"], "baseline_value": base["value"], "per_window": got["windows"]}
