"""The point executor's own contract, in-process (no Ray, no model): cache first, shared() only when a point is
computed, Stop between points, nothing cached for a stopped point, and the flags' one-sentence refusals."""
import threading

import pytest

from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.io.points import Executor, Point, run_points
from analysis.runtime.cancel import Cancelled

SCHEMA = {"square": point_cache.INT}


def square(offset: int, n: int, cancel=None) -> dict:
    return {"square": n * n + offset}


def _points(ns):
    return [Point({"kind": "seam-test", "n": n}, SCHEMA, {"square": n * n}, (n,)) for n in ns]


def test_points_come_in_order_cached_on_the_second_run_and_shared_only_when_computing(sweep_cache):
    calls = []

    def shared(todo):
        calls.append([p.args[0] for p in todo])
        return (0,)
    first = list(run_points(square, _points([1, 2, 3]), shared))
    assert [(i, r["square"], r["cached"]) for i, r in first] == [(0, 1, False), (1, 4, False), (2, 9, False)]
    assert calls == [[1, 2, 3]]
    again = list(run_points(square, _points([1, 2, 3, 4]), shared))
    assert [r["cached"] for _, r in again] == [True, True, True, False] and calls[-1] == [4]
    assert list(run_points(square, _points([1, 2]), shared, use_cache=False))[0][1]["cached"] is False


def test_shared_gets_exactly_the_points_that_miss_not_the_cached_ones_after_the_first_miss(sweep_cache):
    """A missing first point (the unpruned model's) before cached ones (plans): shared() sees only the missing one,
    so a workload that draws a calibration for pruned points draws none (issue 42 follow-up)."""
    list(run_points(square, _points([2, 3]), lambda _: (0,)))
    calls = []
    got = list(run_points(square, _points([1, 2, 5, 3]), lambda todo: calls.append([p.args[0] for p in todo]) or (0,)))
    assert calls == [[1, 5]] and [r["cached"] for _, r in got] == [False, True, False, True]


def test_a_wrong_entry_is_recomputed_not_served(sweep_cache):
    list(run_points(square, _points([2]), lambda _: (1,)))  # stored 5, which is not 2 × 2
    with pytest.warns(point_cache.CacheWarning, match="'square' is 5, not 4"):
        got = list(run_points(square, _points([2]), lambda _: (0,)))
    assert got[0][1] == {"square": 4, "cached": False}


def test_stop_between_points_caches_only_the_finished_ones(sweep_cache):
    token = threading.Event()
    seen = []
    with pytest.raises(Cancelled):
        for i, result in run_points(square, _points([1, 2, 3]), lambda _: (0,), cancel=token):
            seen.append(result["square"])
            token.set()
    assert seen == [1]
    again = list(run_points(square, _points([1, 2, 3]), lambda _: (0,)))
    assert [r["cached"] for _, r in again] == [True, False, False]


def test_executor_flags_are_one_sentence():
    with pytest.raises(AnalysisError, match="add --executor ray, or drop --address"):
        Executor("in-process", "127.0.0.1:9")
    with pytest.raises(AnalysisError, match="Unknown executor 'dask'"):
        Executor("dask")
    assert not Executor().on_ray and Executor().connect() is None
