"""What this session made, for the pages that did not make it, so no feature imports another: the Prune page keeps
its prune run here (the pruned model, its measurements and, once the recovery job has finished, the recovered
model), which "Compare with" (States & rank, Query noise) reads; the Sweep page keeps its sweeps here, which the
Prune page's history of plans shows. Session-bound: never cached, never shared between sessions; the models in
it are never mutated. What the maker does with a recovery (the Prune page's history of plans) it does on its own
page, whichever page took the recovery first."""
from __future__ import annotations

import streamlit as st

from ui.shared import jobs

PRUNED = "pruned"       # st.session_state key of the prune run: {"key", "id", "result", "before", "after", "recovered", …}
RECOVERY = "recovery"   # the job whose result is a recovery of the prune run: {"for": the run's id, "id", "model", …}
SWEEPS = "sweep_results"  # st.session_state key of the sweeps: {settings JSON with the model's path: [points]}


def keep_pruned(run: dict) -> None:
    """This session's prune run (a new prune replaces the last one)."""
    st.session_state[PRUNED] = run


def pruned_run() -> dict | None:
    return st.session_state.get(PRUNED)


def take_recovery(run: dict) -> dict | None:
    """A finished recovery of this prune run, moved into it (by whichever page runs first: the Prune page's
    table or a "Compare with" picker); run["recovered"], or None when there is none."""
    rec = jobs.get(RECOVERY)
    if rec is not None and rec.state == "done" and not rec.taken and rec.result["for"] == run["id"]:
        run["recovered"], rec.taken = rec.result, True
    return run["recovered"]


def sweep_points(key: str) -> list:
    """The points of the sweep with these settings (a JSON string), filled in place as its job yields them."""
    return st.session_state.setdefault(SWEEPS, {}).setdefault(key, [])


def sweeps() -> dict[str, list]:
    return st.session_state.get(SWEEPS, {})
