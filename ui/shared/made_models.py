"""Models made in this session, for the pages that did not make them: the Prune page keeps its prune run here (the
pruned model, its measurements and, once the recovery job has finished, the recovered model), and "Compare with"
(States & rank, Query noise) reads it, so no feature imports another. Session-bound: never cached, never shared
between sessions; the models in it are never mutated. What the maker does with a recovery (the Prune page's
history of plans) it does on its own page, whichever page took the recovery first."""
from __future__ import annotations

import streamlit as st

from ui.shared import jobs

PRUNED = "pruned"       # st.session_state key of the prune run: {"key", "id", "result", "before", "after", "recovered", …}
RECOVERY = "recovery"   # the job whose result is a recovery of the prune run: {"for": the run's id, "id", "model", …}


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
