"""Named-step progress for long first computations: a status box with a bar, and per-layer reports.

Pages call `first_time(is_cached, label)`: a computation already stored shows nothing; one that runs gets
a status box whose bar says which step is running ("layer 2 of 4: …"), collapsed and marked done after.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

from analysis.models.load import attention_layers

Report = Callable[[float, str], None]


class Steps:
    """A status box with a progress bar and, under it, the steps done so far with their times.

    Call it with (fraction 0..1, step text); the step list stays in the (collapsed) box once done.
    """

    def __init__(self, label: str):
        self.label = label
        self.box = st.status(label, expanded=True)
        with self.box:
            self.bar = st.progress(0.0, text="starting…")
            self.log = st.empty()
        self.steps: list[tuple[str, float]] = []  # (text, start time)
        self.pending: ScriptControlException | None = None

    def __call__(self, fraction: float, text: str) -> None:
        if self.pending is not None:
            return
        try:
            self.bar.progress(min(1.0, max(0.0, float(fraction))), text=text)
            if not self.steps or self.steps[-1][0] != text:
                self.steps.append((text, time.perf_counter()))
                self._draw()
        except ScriptControlException as request:
            # A widget changed mid-computation: Streamlit asks for a rerun at this st call. Finish the work
            # (so it is stored, not thrown away) and obey afterwards, in finish().
            self.pending = request

    def finish(self) -> None:
        """Raise the rerun/stop that arrived during the work, if any (call once the result is stored)."""
        if self.pending is not None:
            raise self.pending

    def _draw(self, finished: bool = False) -> None:
        now = time.perf_counter()
        lines = []
        for i, (text, start) in enumerate(self.steps):
            end = self.steps[i + 1][1] if i + 1 < len(self.steps) else now
            running = i + 1 == len(self.steps) and not finished
            lines.append(f"- {text} … " if running else f"- {text} ({end - start:.1f} s)")
        self.log.markdown("\n".join(lines))

    def done(self, label: str) -> None:
        self.finish()
        self.bar.progress(1.0, text="done")
        self._draw(finished=True)
        self.box.update(label=label, state="complete", expanded=False)


@contextlib.contextmanager
def first_time(cached: bool, label: str, done_label: str | None = None):
    """Yield a Report: a live status box when the work is not stored yet, a no-op when it is."""
    if cached:
        yield lambda _f, _t: None
        return
    steps = Steps(label)
    try:
        yield steps
    except Exception:
        steps.box.update(state="error", expanded=False)
        raise
    steps.done(done_label or label.rstrip("…") + ": done")


def span(report: Report, start: float, end: float) -> Report:
    """A Report for one part of a larger job: fractions 0..1 land in [start, end] of the outer bar."""
    return lambda f, text: report(start + (end - start) * f, text)


@contextlib.contextmanager
def per_layer(model, report: Report, what: str, passes: int = 1):
    """Report 'layer i of L: what' as each linear-attention layer starts (over `passes` forward passes).

    The hooks only report; they are added and removed under the caller's compute lock, like the core's own.
    """
    attns = attention_layers(model)
    total = max(1, len(attns) * passes)
    seen = [0]

    def hook(_module, _args, index):
        done = seen[0]
        seen[0] += 1
        prefix = f"pass {done // len(attns) + 1} of {passes}, " if passes > 1 else ""
        report(done / total, f"{prefix}layer {index + 1} of {len(attns)}: {what}")

    hooks = [a.register_forward_pre_hook(lambda m, a_, i=i: hook(m, a_, i)) for i, a in enumerate(attns)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()
