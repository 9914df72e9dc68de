"""The dashboard's one in-process memo: results computed once per server process and shared by every session,
with room for live progress and for job threads (the other caches and their purposes: ui.shared.cache's docstring).

Why not st.cache_data: it records every st call made inside the cached function and replays it on a hit (and fails
on a hit when that call drew into a placeholder made outside), so a progress bar cannot be drawn from inside it; and
a job's thread must not call Streamlit at all. Here the work runs outside any st cache, reporting to the caller's
progress callback, and only the finished result is stored: an LRU of `max_entries` per store (the stores themselves
are an st.cache_resource, so Streamlit's "Clear caches" clears them too). A failed or stopped computation stores
nothing. Stored results are shared: callers must not mutate them.
"""
from __future__ import annotations

import functools
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import streamlit as st


class Store:
    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def get(self, key: Hashable, compute: Callable[[], object]):
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        # computed without holding a lock: callers take ui.shared.cache.compute_lock inside, and a key lock taken
        # around it could deadlock against a job that already holds compute_lock (two sessions racing for
        # one key may both compute it; the second result simply replaces the first)
        value = compute()  # an exception stores nothing: the next call tries again
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


@st.cache_resource(show_spinner=False)
def store(name: str, max_entries: int) -> Store:
    """The process-wide store `name` (created on first use)."""
    return Store(max_entries)


def memoized(name: str, max_entries: int = 16):
    """Decorator: `fn(*args, progress=None)` computed once per args; `fn.is_cached(*args)` asks without computing.

    `progress` is never part of the key: it only receives (fraction, step text) while the work runs; nor are
    `cancel` and arguments whose name starts with "_" (objects the work uses, not what it computes).
    `fn.bind(*args)` resolves the store in the script run and returns a plain `run(progress=None, cancel=None)`
    for a job thread, which must not call Streamlit (the store is an st.cache_resource).
    """
    def decorate(fn):
        signature = inspect.signature(fn)

        def bind_all(args, kwargs, progress=None):
            bound = signature.bind(*args, **kwargs, progress=progress)
            bound.apply_defaults()  # f(a, b) and f(a, b, False) are one entry
            key = tuple(v for k, v in bound.arguments.items()
                        if k not in ("progress", "cancel") and not k.startswith("_"))
            return key, bound

        def compute(bound, progress):
            bound.arguments["progress"] = progress or _silent
            return lambda: fn(*bound.args, **bound.kwargs)

        @functools.wraps(fn)
        def wrapper(*args, progress: Callable[[float, str], None] | None = None, **kwargs):
            key, bound = bind_all(args, kwargs)
            return store(name, max_entries).get(key, compute(bound, progress))

        def bind(*args, **kwargs):
            where = store(name, max_entries)  # here, in the script run

            def run(progress: Callable[[float, str], None] | None = None, cancel=None):
                extra = {"cancel": cancel} if "cancel" in signature.parameters else {}
                key, bound = bind_all(args, {**kwargs, **extra})
                return where.get(key, compute(bound, progress))
            return run

        wrapper.is_cached = lambda *args, **kwargs: bind_all(args, kwargs)[0] in store(name, max_entries)
        wrapper.clear = lambda: store(name, max_entries).clear()
        wrapper.bind = bind
        return wrapper
    return decorate


def _silent(_fraction: float, _text: str) -> None:
    pass
