"""Where the dashboard's multi-point jobs run (analysis.io.points): in this server, or on the Ray cluster the server
was started with. Read once per server process from STATE_RANK_RAY_ADDRESS, which `make run RAY_ADDRESS=host:port`
and `python -m ui.shared.launch --ray-address host:port` set; "local" starts a local Ray with this machine's cores.
The sensitivity map, Verify and choose, the sweep's default and the budget sweep submit their points here. A
cluster that cannot be reached is the job's one-sentence error on the page; the server keeps working."""
from __future__ import annotations

import functools
import os
from contextlib import nullcontext

from analysis.io.points import IN_PROCESS, Executor

ENV = "STATE_RANK_RAY_ADDRESS"
LOCAL = "local"


@functools.lru_cache(maxsize=1)
def executor() -> Executor:
    """The server's executor (the setting is read on first use; tests clear it with executor.cache_clear())."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return IN_PROCESS
    return Executor("ray", None if value == LOCAL else value)


def for_task(task) -> Executor:
    """The executor for a Verify of a model with `task` (a recall model's Verify runs in-process only)."""
    return IN_PROCESS if task is not None else executor()


def where(chosen: Executor | None = None) -> str:
    """The label of where a job's points ran: "points run in this server" or "points run on Ray at host:port"."""
    chosen = executor() if chosen is None else chosen
    if not chosen.on_ray:
        return "points run in this server"
    return f"points run on Ray at {chosen.address}" if chosen.address else \
        "points run on a local Ray (this machine's cores)"


def lock_for(chosen: Executor, lock):
    """The compute lock a job holds between points: none on Ray (the points compute elsewhere; holding it while
    waiting for a result would stall every other session's pages)."""
    return nullcontext() if chosen.on_ray else lock
