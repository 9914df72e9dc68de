"""Long work in a thread of its own: progress, Stop, the end of its session, a cap per server, shutdown.

Streamlit-free (a test imports it with streamlit blocked): the st bindings (`ui.shared.jobs`) tie a `Job` to the
session and the page's inputs and draw it; this module only runs it. Streamlit stops a page's script whenever
the user clicks anything or switches page, so long work (a sweep, a prune, the Query-noise Monte Carlo) runs in
a `Job`: a thread started by `start`, reporting its progress to the job, which the page's script merely reads.
The thread never calls Streamlit: the page resolves every shared object (model, tokenizer, lock, cache stores)
in its script run and hands the work plain objects.

Stop, and the end of the session that started a job (tab closed, session expired: a watchdog thread polls the
check `watch_sessions` is given), set the job's cancel token, which the core checks inside every window, batch
and step, so the work ends within about a second. At most `max_jobs()` run on one server at once. On shutdown
(SIGTERM) `shutdown()` stops them all and waits for their threads, so the interpreter never exits under a
running torch op. A failure ends the job with one sentence in `job.error`: the core's `AnalysisError` as it is,
any other exception (a bug) as one sentence that points to the server log, which gets the traceback.
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

from analysis.errors import AnalysisError, count
from analysis.models import budget
from analysis.models.stream.model import reporting_blocks
from analysis.runtime.cancel import Cancelled  # the core's: raised by Job.report and inside the core's loops
from ui.shared.scheduler import Scheduler, pause_point

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
        self.thread: threading.Thread | None = None
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
        session (or of the server) asked the work to end. Called inside every window, batch and step, it is also
        where the job hands the compute slot to a waiting page (ui.shared.scheduler.pause_point)."""
        pause_point()
        return self._cancel.is_set()

    def report(self, fraction: float, text: str) -> None:
        """Progress from the worker; ends the work (raises Cancelled) once Stop was pressed; a pause point."""
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

    def run(self, work: Callable[[Job], object]) -> None:
        """Run `work(self)` in the calling thread to its end (done, stopped or failed); `start` calls it in a thread."""
        _local.job = self
        try:
            with Scheduler.long_work(self.session_id or id(self)):  # its compute requests are a long job's
                self.result = work(self)
            self.state = "stopped" if self.cancelled() else "done"
        except Cancelled:
            self.state = "stopped"
        except AnalysisError as exc:
            self.error, self.state = str(exc), "failed"
        except Exception as exc:  # a bug: one sentence in the page, the traceback in the server log
            log.error("job %s failed:\n%s", self.name, traceback.format_exc())
            self.error = (f"The {self.name} stopped on an unexpected error ({type(exc).__name__}); "
                          "the server log has the details.")
            self.state = "failed"
        finally:
            self.fraction = 1.0 if self.state == "done" else self.fraction
            self.ended = time.monotonic()
            if self.seconds_to_end is not None:
                say(f"The {self.name} job ended {self.seconds_to_end:.2f} s after its stop was received ({self.state}).")
            with _running_lock:
                _running.discard(self)


def start(job: Job, work: Callable[[Job], object]) -> bool:
    """Run `work(job)` in a daemon thread, with the caller's memory budget; False (nothing starts) when the server
    already runs `max_jobs()` jobs."""
    with _running_lock:
        if len(_running) >= max_jobs():
            return False
        _running.add(job)
    chosen = budget.current()  # the caller's memory budget goes with the work into its thread

    def run_within_budget():
        with budget.budget_scope(chosen), reporting_blocks(job.blocks):
            job.run(work)
    job.thread = threading.Thread(target=run_within_budget, name=f"job-{job.name}", daemon=True)
    job.thread.start()
    return True


def say(line: str) -> None:
    """One line in the server's log (stderr), for the operator: when a stop arrived and how long the work took to end."""
    print(f"state-rank jobs: {line}", file=sys.stderr, flush=True)


def this_job() -> Job | None:
    """The job whose thread is calling (None in a script run): lets a generator see Stop."""
    return getattr(_local, "job", None)


def running_jobs() -> list[Job]:
    with _running_lock:
        return list(_running)


def always_alive(_session_id: str | None) -> bool:
    return True


session_alive: Callable[[str | None], bool] = always_alive   # the watchdog's check, set by watch_sessions
_watchdog: list = []


def watch_sessions(alive: Callable[[str | None], bool]) -> None:
    """Stop a job once `alive(job.session_id)` has been False for SESSION_GRACE seconds (its tab closed, its
    session expired); the watchdog thread starts on the first call."""
    global session_alive
    session_alive = alive
    with _running_lock:
        if not _watchdog:
            _watchdog.append(threading.Thread(target=_watch, name="job-watchdog", daemon=True))
            _watchdog[0].start()


def _watch() -> None:
    gone_since: dict = {}
    while True:
        time.sleep(WATCH_EVERY)
        now, jobs_now = time.monotonic(), running_jobs()
        for job in jobs_now:
            if session_alive(job.session_id):
                gone_since.pop(job, None)
            elif now - gone_since.setdefault(job, now) >= SESSION_GRACE and not job.cancelled():
                log.warning("Stopping the %s job (%s): its session ended.", job.name, job.label)
                job.stop("The end of its session")
        for job in set(gone_since) - set(jobs_now):
            del gone_since[job]


def shutdown(timeout: float = 20.0) -> int:
    """Stop every running job and wait (up to `timeout` s in all) for its thread; the number stopped.

    Called when the server stops (ui.shared.launch after SIGTERM, and at exit): a daemon thread left inside a torch
    op while the interpreter finalizes aborts the process ("terminate called without an active exception").
    """
    jobs_now = running_jobs()
    for job in jobs_now:
        job.stop("The server's shutdown")
    deadline = time.monotonic() + timeout
    for job in jobs_now:
        if job.thread is not None:
            job.thread.join(max(0.0, deadline - time.monotonic()))
    return len(jobs_now)


atexit.register(shutdown)


def stop_all(why: str) -> int:
    """Tell every running job to stop, without waiting (a signal handler's part: the threads end on their own)."""
    jobs_now = running_jobs()
    for job in jobs_now:
        job.stop(why)
    return len(jobs_now)
