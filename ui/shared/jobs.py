"""Long work of a page, tied to the inputs it was started for, that survives reruns and page switches.

Background jobs (`Job`, `launch`, `follow`): Streamlit stops a page's script whenever the user clicks
anything or switches page, so long work (a sweep, a prune, a recovery) runs in its own thread, started
only by a click, and keyed by the model + settings it was started with. The page's script merely
*follows* it: it redraws the progress and results while the job runs, and a rerun or page switch stops
only the following, never the work. Coming back to the page shows the job where it is (or its result).
A page whose current model or settings differ from a running job's key never adopts that job (and
never starts one): it says that the job is running for other inputs and offers Stop. One job per kind
(name) per session. The thread never calls Streamlit: the page resolves every shared object (model,
tokenizer, lock, cache stores) in its script run and hands the work plain objects.

Jobs belong to their session and to the server: Stop, and the end of the session that started a job (tab
closed, session expired; a watchdog thread polls the runtime), set the job's cancel token, which the core
checks inside every window, batch and step, so the work ends within about a second. At most `max_jobs()`
run on one server at once. On shutdown (SIGTERM) `shutdown()` stops them all and waits for their threads,
so the interpreter never exits under a running torch op.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from analysis.models import budget
from analysis.models.stream.model import reporting_blocks
from analysis.runtime.cancel import Cancelled  # the core's: raised by Job.report and inside the core's loops
from analysis.errors import AnalysisError, count

log = logging.getLogger(__name__)
_local = threading.local()

MAX_JOBS_ENV = "STATE_RANK_MAX_JOBS"
MAX_JOBS = 2           # jobs running at once on one server: each keeps a core busy, and this machine has 2
SESSION_GRACE = 0.5    # seconds a session may be disconnected before its jobs stop (a tab closed or expired)
WATCH_EVERY = 0.25     # the watchdog's poll interval: a job of a closed tab stops within about a second
_running: set = set()  # every running job of this server process, whatever its session
_running_lock = threading.Lock()


def max_jobs() -> int:
    """The cap on jobs running at once (STATE_RANK_MAX_JOBS overrides the default of 2)."""
    try:
        return max(1, int(os.environ.get(MAX_JOBS_ENV, MAX_JOBS)))
    except ValueError:
        return MAX_JOBS


def busy_message(n: int) -> str:
    return f"The server is busy: {count(n, 'job')} {'is' if n == 1 else 'are'} running; try again when one ends."


class Job:
    """One piece of background work: its key, label, progress, partial items, result or error."""

    def __init__(self, name: str, key: str, label: str, session_id: str | None = None):
        self.name, self.key, self.label = name, key, label
        self.session_id = session_id      # the session that started it: the job ends with it
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
        self.stop_received: float | None = None   # time.monotonic() when Stop (or the session's or server's end) arrived
        self.ended: float | None = None           # ... and when the work's thread returned

    @property
    def running(self) -> bool:
        return self.state == "running"

    def stop(self, why: str = "Stop") -> None:
        if not self._cancel.is_set():
            self.stop_received = time.monotonic()
            say(f"{why} received for the {self.name} job ({self.label}).")
        self._cancel.set()

    @property
    def seconds_to_end(self) -> float | None:
        """From the stop's arrival on the server to the end of the work (None: not stopped, or not ended yet)."""
        return None if self.stop_received is None or self.ended is None else self.ended - self.stop_received

    def cancelled(self) -> bool:
        """The cancel token the core's loops take (`cancel=job.cancelled`): True once Stop or the end of the
        session (or of the server) asked the work to end."""
        return self._cancel.is_set()

    def report(self, fraction: float, text: str) -> None:
        """Progress from the worker; ends the work (raises Cancelled) once Stop was pressed."""
        self.fraction, self.text = max(0.0, min(1.0, float(fraction))), text
        if self.cancelled():
            raise Cancelled

    def blocks(self, done: int, total: int, bytes_read: int, seconds: float) -> None:
        """A streamed model's progress (analysis.models.stream): the block, the bytes read and an ETA after the text."""
        eta = seconds / max(done, 1) * (total - done)
        self.text = (f"{self.text.split(' · ')[0]} · streaming block {done}/{total}, {bytes_read / 1e9:.2f} GB read, "
                     f"about {eta:.0f} s left")
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
            self.ended = time.monotonic()
            if self.seconds_to_end is not None:
                say(f"The {self.name} job ended {self.seconds_to_end:.2f} s after its stop was received ({self.state}).")
            with _running_lock:
                _running.discard(self)


def say(line: str) -> None:
    """One line in the server's log (stderr), for the operator: when a stop arrived and how long the work took to end."""
    print(f"state-rank jobs: {line}", file=sys.stderr, flush=True)


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


def launch(name: str, key: str, label: str, work: Callable[[Job], object]) -> Job | None:
    """Start `work(job)` in a daemon thread (call only on a click). Refused while another one of this kind runs
    in this session; when the server already runs `max_jobs()`, one line says so and nothing starts (None)."""
    old = get(name)
    if old is not None and old.running:
        raise AnalysisError(f"A {name} is already running ({old.label}); stop it first.")
    ctx = get_script_run_ctx(suppress_warning=True)
    job = Job(name, key, label, ctx.session_id if ctx is not None else None)
    with _running_lock:
        if len(_running) >= max_jobs():
            st.error(busy_message(len(_running)))
            return None
        _running.add(job)
    chosen = budget.current()  # the session's memory budget goes with the work into its thread

    def run_within_budget(work=work):
        with budget.budget_scope(chosen), reporting_blocks(job.blocks):
            job._run(work)
    job._thread = threading.Thread(target=run_within_budget, name=f"job-{name}", daemon=True)
    st.session_state[_slot(name)] = job
    _start_watchdog()
    job._thread.start()
    return job


def running_jobs() -> list[Job]:
    with _running_lock:
        return list(_running)


def _session_alive(session_id: str | None) -> bool:
    """False once the session that started a job is no longer connected (tab closed, session expired)."""
    from streamlit.runtime import Runtime
    if session_id is None or not Runtime.exists():  # AppTest has no runtime: its sessions never end
        return True
    return Runtime.instance().is_active_session(session_id)


def _watch() -> None:
    gone_since: dict = {}
    while True:
        time.sleep(WATCH_EVERY)
        now, jobs_now = time.monotonic(), running_jobs()
        for job in jobs_now:
            if _session_alive(job.session_id):
                gone_since.pop(job, None)
            elif now - gone_since.setdefault(job, now) >= SESSION_GRACE and not job.cancelled():
                log.warning("Stopping the %s job (%s): its session ended.", job.name, job.label)
                job.stop("The end of its session")
        for job in set(gone_since) - set(jobs_now):
            del gone_since[job]


_watchdog: list = []


def _start_watchdog() -> None:
    with _running_lock:
        if not _watchdog:
            _watchdog.append(threading.Thread(target=_watch, name="job-watchdog", daemon=True))
            _watchdog[0].start()


def shutdown(timeout: float = 20.0) -> int:
    """Stop every running job and wait (up to `timeout` s in all) for its thread; the number stopped.

    Called when the server stops (ui.launch after SIGTERM, and at exit): a daemon thread left inside a torch
    op while the interpreter finalizes aborts the process ("terminate called without an active exception").
    """
    jobs_now = running_jobs()
    for job in jobs_now:
        job.stop("The server's shutdown")
    deadline = time.monotonic() + timeout
    for job in jobs_now:
        if job._thread is not None:
            job._thread.join(max(0.0, deadline - time.monotonic()))
    return len(jobs_now)


atexit.register(shutdown)


def stop_job(name: str) -> None:
    job = get(name)
    if job is not None:
        job.stop()


def stop_all(why: str) -> int:
    """Tell every running job to stop, without waiting (a signal handler's part: the threads end on their own)."""
    jobs_now = running_jobs()
    for job in jobs_now:
        job.stop(why)
    return len(jobs_now)


def controls(name: str, key: str, run_label: str, disabled: bool = False, container=st,
             run_key: str | None = None) -> bool:
    """Run and Stop side by side; True when Run was clicked in this run. Run is off while a job of this
    kind runs (for any inputs); Stop ends the running one."""
    job = get(name)
    running = job is not None and job.running
    # the callback's request is read once (a button's own value may outlive an st.rerun); the job then takes the
    # inputs of this run (the click's own run, with any value typed just before the click)
    start = bool(st.session_state.pop(_request(name), False)) and not running
    row = container.container(horizontal=True)  # each button as wide as its label: a long one is never cut
    row.button(run_label, key=run_key or f"{name}:run", disabled=disabled or running or start, type="primary",
               on_click=st.session_state.__setitem__, args=(_request(name), True))
    # live while a job runs, including the one this run is about to launch (the page then follows it)
    row.button("Stop", key=f"{name}:stop", on_click=stop_job, args=(name,), disabled=not (running or start))
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


def follow_in_status(job: Job, title: str, notes: tuple[str, ...] = ()) -> None:
    """A job of this page that is running: a status box with its notes and a progress bar until it ends, then
    a rerun, so the page takes the result (or shows the error) and redraws its buttons."""
    with st.status(title, expanded=True):
        for note in notes:
            st.caption(note)
        bar = st.progress(0.0)
        follow(job, lambda j: bar.progress(j.fraction, text=j.text))
    st.rerun()


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
