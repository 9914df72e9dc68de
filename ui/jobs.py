"""Long work of a page, tied to the inputs it was started for, that survives reruns and page switches.

Background jobs (`Job`, `launch`, `follow`): Streamlit stops a page's script whenever the user clicks
anything or switches page, so long work (a sweep, a prune, a recovery) runs in its own thread, started
only by a click, and keyed by the model + settings it was started with. The page's script merely
*follows* it: it redraws the progress and results while the job runs, and a rerun or page switch stops
only the following, never the work. Coming back to the page shows the job where it is (or its result).
A page whose current model or settings differ from a running job's key never adopts that job (and
never starts one): it says that the job is running for other inputs and offers Stop. One job per kind
(name) per session; the thread never calls Streamlit (it only reads shared caches and fills the job).

Session flags (`start`, `stop`, `active`, `buttons`, `steps`): the older, in-script form kept for pages
that step through a generator inside the script run.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator

import streamlit as st

from analysis.errors import AnalysisError

log = logging.getLogger(__name__)
_local = threading.local()


class Cancelled(Exception):
    """Raised inside a job's thread (by `Job.report`) once Stop was pressed."""


class Job:
    """One piece of background work: its key, label, progress, partial items, result or error."""

    def __init__(self, name: str, key: str, label: str):
        self.name, self.key, self.label = name, key, label
        self.state = "running"            # running | done | stopped | failed
        self.fraction, self.text = 0.0, "starting…"
        self.items: list = []             # partial results (points), in order
        self.result = None
        self.error: str | None = None
        self.started = time.time()
        self.taken = False                # the page has stored the result where it belongs
        self.settled = False              # a page run has started after the job ended (it drew the end state)
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"

    def stop(self) -> None:
        self._cancel.set()

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def report(self, fraction: float, text: str) -> None:
        """Progress from the worker; ends the work (raises Cancelled) once Stop was pressed."""
        self.fraction, self.text = max(0.0, min(1.0, float(fraction))), text
        if self.cancelled():
            raise Cancelled

    def _run(self, work: Callable[[Job], object]) -> None:
        _local.job = self
        try:
            self.result = work(self)
            self.state = "stopped" if self.cancelled() else "done"
        except Cancelled:
            self.state = "stopped"
        except AnalysisError as exc:
            self.error, self.state = str(exc), "failed"
        except Exception as exc:  # a bug: one sentence in the page, the traceback in the server log
            log.error("job %s failed:\n%s", self.name, traceback.format_exc())
            self.error = (f"The {self.name} stopped on an unexpected error ({type(exc).__name__}: {exc}); "
                          "the server log has the details.")
            self.state = "failed"
        finally:
            self.fraction = 1.0 if self.state == "done" else self.fraction


def this_job() -> Job | None:
    """The job whose thread is calling (None in a script run): lets a generator see Stop."""
    return getattr(_local, "job", None)


def _slot(name: str) -> str:
    return f"bgjob:{name}"


def get(name: str) -> Job | None:
    """This session's latest job of kind `name` (running or finished), whatever its key."""
    return st.session_state.get(_slot(name))


def mine(name: str, key: str) -> Job | None:
    """This session's job of kind `name` if it was started for `key` (the page's current inputs)."""
    job = get(name)
    return job if job is not None and job.key == key else None


def busy_elsewhere(name: str, key: str) -> Job | None:
    """A running job of kind `name` started for other inputs than `key`."""
    job = get(name)
    return job if job is not None and job.running and job.key != key else None


def launch(name: str, key: str, label: str, work: Callable[[Job], object]) -> Job:
    """Start `work(job)` in a daemon thread (call only on a click). Refused while another one runs."""
    old = get(name)
    if old is not None and old.running:
        raise AnalysisError(f"A {name} is already running ({old.label}); stop it first.")
    job = Job(name, key, label)
    job._thread = threading.Thread(target=job._run, args=(work,), name=f"job-{name}", daemon=True)
    st.session_state[_slot(name)] = job
    job._thread.start()
    return job


def stop_job(name: str) -> None:
    job = get(name)
    if job is not None:
        job.stop()


def controls(name: str, key: str, run_label: str, disabled: bool = False, container=st,
             run_key: str | None = None) -> bool:
    """Run and Stop side by side; True when Run was clicked in this run. Run is off while a job of this
    kind runs (for any inputs); Stop ends the running one."""
    job = get(name)
    running = job is not None and job.running
    # the callback's request is read once (a button's own value may outlive an st.rerun); the job then takes the
    # inputs of this run (the click's own run, with any value typed just before the click)
    start = bool(st.session_state.pop(_request(name), False)) and not running
    left, right, _ = container.columns([1, 1, 4])
    left.button(run_label, key=run_key or f"{name}:run", disabled=disabled or running or start, type="primary",
                on_click=st.session_state.__setitem__, args=(_request(name), True))
    # live while a job runs, including the one this run is about to launch (the page then follows it)
    right.button("Stop", key=f"{name}:stop", on_click=stop_job, args=(name,), disabled=not (running or start))
    return start


def _request(name: str) -> str:
    return f"bgjob-request:{name}"


def other_inputs_note(job: Job) -> str:
    return (f"A {job.name} started for other inputs is still running in the background: {job.label} "
            f"({job.fraction:.0%}: {job.text}). Nothing runs for the current model and settings until you "
            f"press the button; **Stop** ends that {job.name}, and going back to its model and settings shows it.")


def unsettled(job: Job | None) -> bool:
    """True while the job runs, and once more after it ended (a fast job may end before the page looked)."""
    return job is not None and (job.running or not job.settled)


def follow(job: Job, draw: Callable[[Job], None], interval: float = 0.3) -> None:
    """Redraw while `job` runs (a rerun or page switch ends this loop, not the job), then once more; the
    caller then reruns the page (st.rerun) so buttons and captions match the end state."""
    seen, beat = None, st.empty()
    while job.running:
        now = (len(job.items), round(job.fraction, 3), job.text)
        if now != seen:
            draw(job)
            seen = now
        else:
            beat.empty()  # an st call each turn: where Streamlit ends this run when the user clicks elsewhere
        time.sleep(interval)
    draw(job)
    job.settled = True


# --- session flags: work stepped inside the script run -------------------------------------------------

def _flag(name: str) -> str:
    return f"job:{name}"


def start(name: str) -> None:
    st.session_state[_flag(name)] = True


def stop(name: str) -> None:
    st.session_state[_flag(name)] = False


def active(name: str) -> bool:
    return bool(st.session_state.get(_flag(name), False))


def buttons(name: str, run_label: str, disabled: bool = False, container=st) -> None:
    """Run (or Resume) and Stop, side by side; Stop is live only while the job runs."""
    left, right, _ = container.columns([1, 1, 4])
    left.button(run_label, key=f"{name}:run", on_click=start, args=(name,), disabled=disabled, type="primary")
    right.button("Stop", key=f"{name}:stop", on_click=stop, args=(name,), disabled=not active(name))


def steps(name: str, items: Iterable) -> Iterator:
    """Yield while the job is active; the flag is cleared when the items run out or a step fails."""
    try:
        for item in items:
            yield item
            if not active(name):
                return
    except AnalysisError:
        stop(name)
        raise
    stop(name)
