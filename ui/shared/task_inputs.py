"""The lm-evaluation-harness task choice of the Sweep and Prune pages (analysis.evaluate.harness): local tasks
(no network), other harness tasks by name, docs per task, few-shot examples and batch size."""
from __future__ import annotations

import streamlit as st

from analysis.errors import AnalysisError
from analysis.evaluate.harness import TaskSettings
from analysis.evaluate.harness_tasks import local_tasks
from ui.shared import state
from ui.shared.context import Context


def controls(ctx: Context, prefix: str) -> TaskSettings | None:
    """The tasks to score beside perplexity (None: none chosen). A recall model is offered the recall tasks only."""
    recall = ctx.task is not None
    offered = {n: t for n, t in local_tasks().items() if (t.recall_keys is not None) == recall}
    with st.expander("Downstream accuracy (lm-evaluation-harness)", key=f"{prefix}_tasks_settings"):
        chosen = state.field(st.multiselect, "Local tasks (no network needed)", f"{prefix}_tasks", [],
                             options=list(offered))
        other = "" if recall else state.field(
            st.text_input, "Other harness tasks (comma-separated; data from the Hugging Face cache or the hub)",
            f"{prefix}_other_tasks", "").strip()
        c1, c2, c3 = st.columns(3)
        limit = int(state.field(c1.number_input, "Docs per task", f"{prefix}_task_limit", 200, 1, 100_000, step=50))
        shots = int(state.field(c2.number_input, "Few-shot examples (0: the task's own)", f"{prefix}_task_shots", 0,
                                0, 64))
        batch = int(state.field(c3.number_input, "Batch (sequences)", f"{prefix}_task_batch", 8, 1, 256))
        for name in chosen:
            t = offered[name]
            st.caption(f"**{name}** ({t.docs:,} docs; chance {t.chance_note}): {t.what}.")
        st.caption("Accuracy is lm-evaluation-harness's own, with its standard error; the first N docs of each task "
                   "are scored (on the project's 2-core CPU a bundled sample takes about 0.1 s per answer choice).")
    names = tuple(chosen) + tuple(n.strip() for n in other.split(",") if n.strip())
    if not names:
        return None
    try:
        return TaskSettings(names, limit=limit, num_fewshot=shots or None, batch_size=batch)
    except AnalysisError as exc:
        st.error(str(exc))
        return None
