"""Long work of a page, tied to the inputs it was started for, that survives reruns and page switches: the st
bindings of the Streamlit-free runner (`ui.shared.job_runner`, which runs a `Job` in its thread, with progress,
Stop, a cap per server and shutdown).

`launch` starts a job only on a click, keyed by the model + settings it was started with, and holds it in the
session (one job per kind per session); the job ends with its session (the runner's watchdog asks Streamlit's
runtime whether the session is still connected). The page's script merely *follows* it (`follow`): it redraws
the progress and results while the job runs, and a rerun or page switch stops only the following, never the work.
Coming back to the page shows the job where it is (or its result). A page whose current model or settings differ
from a running job's key never adopts that job (and never starts one): it says that the job is running for other
inputs and offers Stop (`controls`).
"""
from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from analysis.errors import AnalysisError
from ui.shared.job_runner import Job, busy_message, running_jobs, start, watch_sessions


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
    if not start(job, work):
        st.error(busy_message(len(running_jobs())))
        return None
    st.session_state[_slot(name)] = job
    watch_sessions(_session_alive)
    return job


def _session_alive(session_id: str | None) -> bool:
    """False once the session that started a job is no longer connected (tab closed, session expired)."""
    from streamlit.runtime import Runtime
    if session_id is None or not Runtime.exists():  # AppTest has no runtime: its sessions never end
        return True
    return Runtime.instance().is_active_session(session_id)


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
