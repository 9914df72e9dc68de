"""The compute slot: one forward pass at a time on this server, interactive work first (docs/serving.md).

Why one slot: the loaded models are ONE object per server process, shared by every session (ui.shared.cache),
and forward hooks (state collection, calibration, per-layer progress, recall noise) are a mutation of that
object. Hooks are registered and removed inside one holding of the slot, so two sessions never interleave their
hooks on the same modules. One slot also bounds memory and keeps timings meaningful.

The rules (they replace the process-wide RLock that froze every session behind one long job, issue 42):

1. **One holder at a time, re-entrant.** A thread that holds the slot takes it again freely (cached calls nest);
   it is free again when the outermost holding ends, by return or by exception.
2. **Interactive requests go first.** A request from a page's own script run (states for a page, a State lab
   step, one text) is served before any waiting long job, in arrival order.
3. **Long jobs hold the slot only per chunk and yield between them.** A job's thread (marked by `long_work`)
   holds it per point or chunk (the map's and the sweep's loops take it per point); inside a holding, every
   progress report and every cancel check of the job (`Job.report`/`Job.cancelled`, called inside every window,
   batch and step) is a `pause_point`: when someone is waiting, the job hands the slot over and takes it back
   afterwards. It pauses only when the shared models are quiescent: no forward/backward hook and no patched
   `forward` on any module of a guarded model, no global module hook, no recurrence observer in its context, and
   no pass running over a streamed model among them (a streamed pass holds its skeleton for the whole pass; a
   streamed model that is only cached is idle). Otherwise it runs on to
   the next pause point, so the hooks guarantee above still holds.
4. **Two long jobs of different sessions alternate fairly.** Among waiting long jobs, the session served least
   recently goes next (then arrival order); a holding long job yields to another long job at a pause point once
   it has held the slot for `quantum` seconds.
5. **Memory stays bounded.** One computation runs at a time for the whole process, so peak memory is the loaded
   models + one forward pass + what each running job keeps while paused (its pruned copy and the window it was
   measuring; at most `job_runner.max_jobs()` jobs) + the jobs' kept results.

A stream of interactive requests can delay long jobs (never the reverse); interactive work itself never pauses.
Streamlit-free: the job runner imports it in a thread that must never call Streamlit.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass

INTERACTIVE, LONG = "interactive", "long"
SERVED_KEPT = 256  # parties whose latest grant is remembered (a forgotten one counts as never served: it goes first)
QUANTUM = 0.5  # seconds a long job holds the slot before it yields to another waiting long job at a pause point

_local = threading.local()  # .party: the long job's party (its session) for a thread inside `long_work`


@dataclass
class Ticket:
    """One thread's request for the slot (re-enqueued with a new number when a paused job asks again)."""
    thread: int
    kind: str
    party: Hashable
    number: int
    depth: int = 1  # the depth the holder gets back (a paused job's nesting)


class Scheduler:
    """The compute slot (the rules: this module's docstring). Use as a context manager, like the lock it
    replaces: `with scheduler:`; a job thread's class and party come from `long_work`."""

    def __init__(self, quantum: float = QUANTUM, clock: Callable[[], float] = time.monotonic):
        self.quantum, self.clock = quantum, clock
        self._cond = threading.Condition(threading.Lock())
        self._holder: Ticket | None = None
        self._held_since = 0.0
        self._waiting: list[Ticket] = []
        self._numbers = itertools.count()
        self._served: dict[Hashable, int] = {}   # party -> the grant number of its latest holding
        self._grants = itertools.count()
        self._guarded: weakref.WeakSet = weakref.WeakSet()

    # --- the slot ---------------------------------------------------------------------------------------------
    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._holder is not None and self._holder.thread == me:
                self._holder.depth += 1
                return
            party = getattr(_local, "party", None)
            kind = INTERACTIVE if party is None else LONG
            behind_long = kind == INTERACTIVE and self._holder is not None and self._holder.kind == LONG
            asked = time.monotonic()
            self._wait_for(Ticket(me, kind, party, next(self._numbers)))
        if behind_long:  # the operator's (and the two-session test's) measure of rule 2
            print(f"state-rank scheduler: an interactive request waited {time.monotonic() - asked:.2f} s for the "
                  "compute slot behind a long job", file=sys.stderr, flush=True)

    def release(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._holder is None or self._holder.thread != me:
                raise RuntimeError("release of the compute slot by a thread that does not hold it")
            self._holder.depth -= 1
            if self._holder.depth == 0:
                self._holder = None
                self._cond.notify_all()

    def _wait_for(self, ticket: Ticket) -> None:
        """Queue `ticket` and wait until it is the one served (called under the condition's lock)."""
        self._waiting.append(ticket)
        self._cond.notify_all()  # state changed: tests and holders at a pause point may look
        try:
            while not (self._holder is None and self._next() is ticket):
                self._cond.wait()
        except BaseException:
            self._waiting.remove(ticket)
            self._cond.notify_all()
            raise
        self._waiting.remove(ticket)
        self._holder, self._held_since = ticket, self.clock()
        self._served[ticket.party] = next(self._grants)
        if len(self._served) > SERVED_KEPT:  # a long-lived server: forget the parties served longest ago
            for party in sorted(self._served, key=self._served.get)[:len(self._served) - SERVED_KEPT]:
                del self._served[party]
        self._cond.notify_all()

    def _next(self) -> Ticket | None:
        """The waiting request served next: interactive first (arrival order), then the long job whose party
        was served least recently (never served first), then arrival order."""
        interactive = [t for t in self._waiting if t.kind == INTERACTIVE]
        if interactive:
            return min(interactive, key=lambda t: t.number)
        return min(self._waiting, key=lambda t: (self._served.get(t.party, -1), t.number), default=None)

    # --- pausing inside a long job's holding --------------------------------------------------------------------
    def pause_point(self) -> bool:
        """Called by a long job between windows, batches and steps: hand the slot to whoever should go first,
        then take it back with the same nesting. True when it paused. A no-op for a thread not holding the slot,
        for interactive work, when no one should go first, and while the shared models are not quiescent."""
        me = threading.get_ident()
        holder = self._holder
        if holder is None or holder.thread != me or holder.kind != LONG or not self._waiting:
            return False  # racy reads are fine: only this thread can make itself the holder or stop being it
        with self._cond:
            if not self._should_yield(holder):
                return False
        if not self.quiescent():
            return False
        with self._cond:
            if not self._should_yield(holder):
                return False
            depth, self._holder = holder.depth, None
            self._cond.notify_all()
            again = Ticket(me, LONG, holder.party, next(self._numbers), depth)
            self._wait_for(again)
        return True

    def _should_yield(self, holder: Ticket) -> bool:
        others = [t for t in self._waiting if t.thread != holder.thread]
        if any(t.kind == INTERACTIVE for t in others):
            return True
        return bool(others) and self.clock() - self._held_since >= self.quantum

    # --- what must be quiescent ---------------------------------------------------------------------------------
    def guard(self, model):
        """Register a model every session shares (its hooks decide whether a long job may pause); returns it."""
        with self._cond:
            self._guarded.add(model)
        return model

    def quiescent(self) -> bool:
        """Nothing the calling thread's work installed on a shared model is in place: a pause cannot let another
        session's forward pass run through this job's hooks (or this job's pass see theirs)."""
        import torch.nn.modules.module as torch_module
        from analysis.runtime.backend import observing
        if observing():
            return False
        if any(getattr(torch_module, name, None) for name in
               ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                "_global_backward_pre_hooks")):
            return False
        with self._cond:
            models = list(self._guarded)
        return not any(_busy(model) for model in models)

    # --- marking and watching -----------------------------------------------------------------------------------
    @staticmethod
    @contextlib.contextmanager
    def long_work(party: Hashable):
        """Inside, the calling thread's requests are a long job's, of `party` (its session): the job runner's."""
        before = getattr(_local, "party", None)
        _local.party = party
        try:
            yield
        finally:
            _local.party = before

    def state(self) -> dict:
        """A snapshot for tests and the operator: the holder and the queue as (kind, party) pairs, the depth."""
        with self._cond:
            return self._snapshot()

    def _snapshot(self) -> dict:
        holder = self._holder
        return {"holder": None if holder is None else (holder.kind, holder.party),
                "depth": 0 if holder is None else holder.depth,
                "waiting": [(t.kind, t.party) for t in self._waiting]}

    def wait_until(self, predicate: Callable[[dict], bool], timeout: float | None = None) -> bool:
        """Block until `predicate(self.state())` holds (re-checked on every change of the slot); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not predicate(self._snapshot()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

def _busy(model) -> bool:
    """A hook or a patched forward on any module of `model`, or a streamed model while a pass over it runs (the pass
    holds its skeleton: a page's pass on it would wait on the paused job) or some of its weights are materialised.
    A streamed model merely cached by the server is idle: a job may pause beside it."""
    if getattr(model, "streamed", False) and getattr(model, "running", True):
        return True
    modules = getattr(model, "modules", None)
    if modules is None:
        return True  # not a torch module: assume the worst
    for m in modules():
        if (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or getattr(m, "_backward_pre_hooks", None)
                or "forward" in m.__dict__):
            return True
    return False


SCHEDULER = Scheduler()  # the one slot of this server process (ui.shared.cache.compute_lock returns it)


def pause_point() -> bool:
    """The process's `SCHEDULER.pause_point()`: a job's report and cancel check call it."""
    return SCHEDULER.pause_point()
