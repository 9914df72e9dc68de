"""Cooperative cancellation for the core's long loops (evaluation windows, calibration batches, recovery
steps, sweep and sensitivity points).

A caller (the dashboard's job, a test) passes `cancel`: a zero-argument callable that returns True once the
work should end, or an object with `is_set()` (a `threading.Event`). The loops call `check(cancel)` before
each step, so a stop takes effect within one step rather than at the end of a point; `Cancelled` then
unwinds the work, and nothing half-done is cached or written (writes happen only after a step returns).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Protocol, Union


class _Event(Protocol):
    def is_set(self) -> bool: ...


Token = Union[Callable[[], bool], _Event, None]


class Cancelled(Exception):
    """The caller asked the work to stop (not an error: nothing is reported to the user as failed)."""


def is_cancelled(cancel: Token) -> bool:
    if cancel is None:
        return False
    return bool(cancel.is_set() if hasattr(cancel, "is_set") else cancel())


def check(cancel: Token) -> None:
    """Raise Cancelled when `cancel` says so (a no-op for None)."""
    if is_cancelled(cancel):
        raise Cancelled


@contextlib.contextmanager
def checked_inside(modules: Iterable, cancel: Token):
    """check(cancel) before each of `modules` (torch modules, e.g. a model's blocks) runs its forward, and again when
    a backward pass reaches its output, so a stop takes effect within one layer of a forward or of its backward
    rather than at the end of a training step or a batch of windows. Only for a model no one else runs meanwhile (a
    private training copy): the hooks are the caller's, and their Cancelled unwinds its step. Hooks on the outputs
    stay with this forward's graph, so a backward run after the block has left still checks."""
    if cancel is None:
        yield
        return

    def on_gradient(grad):
        check(cancel)
        return grad

    def after(_module, _args, output):
        out = output[0] if isinstance(output, (tuple, list)) and output else output
        if getattr(out, "requires_grad", False):
            out.register_hook(on_gradient)

    handles = []
    for m in modules:
        handles += [m.register_forward_pre_hook(lambda *_: check(cancel)), m.register_forward_hook(after)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
