"""What every page starts from: the chosen model (loaded, shared, read-only) and the chosen inputs."""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from analysis.models import load as models
from analysis.data.recall import RecallTask
from ui.shared import cache
from ui.shared.batches import display_name
from ui.shared.errors import guard
from ui.shared.keys import InputSpec, ModelKey
from ui.shared.labels import Provenance
from ui.shared.progress import first_time

NO_MODEL = ("No model is selected and no bundled sample is installed yet: in the sidebar choose "
            "**Local directory** and enter a folder written by `save_pretrained` (or a hub id when online). "
            "Bundled samples appear under `sample_models/`.")
NO_MODEL_CHOSEN = ("No model is selected: enter a folder written by `save_pretrained` in the sidebar's "
                   "**Local directory** field (or a hub id under **Hub id** when online), or choose one of the "
                   "{n} bundled samples under **Bundled sample**.")


def no_model_message() -> str:
    """What to do when the sidebar's model field is empty (it depends on whether samples are installed)."""
    n = len(models.list_samples())
    return NO_MODEL_CHOSEN.format(n=n) if n else NO_MODEL


@dataclass
class Context:
    key: ModelKey
    name: str
    model: object          # shared across sessions: never mutate (see ui.shared.cache)
    info: models.ArchitectureInfo
    spec: InputSpec
    task: RecallTask | None  # set for recall models, which read synthetic sequences instead of text

    def provenance(self, data: dict) -> Provenance:
        return Provenance(self.name, data["dataset"], data["tokens"], data["sequences"],
                          self.key.device, self.key.dtype)


def current() -> Context:
    """Load the sidebar's model (spinner on first load); show the problem and stop the page if it fails."""
    source, device, dtype, max_memory = st.session_state.get("model_request", ("", "auto", "auto", None))
    if not source:
        st.info(no_model_message())
        st.stop()
    with guard():
        key = cache.resolve(source, device, dtype, max_memory)
        with st.spinner(f"Loading {source} on {key.device} ({key.dtype})…"):
            model = cache.shared_model(key)
        info = models.describe(model)
    spec = st.session_state.get("input_spec") or InputSpec("split")
    return Context(key, display_name(key.path), model, info, spec, cache.recall_task(key))


def traced(ctx: Context, stride: int, random_init: bool = False) -> dict:
    """States of the chosen inputs (computed once, with named-step progress); bad inputs become one st.error."""
    args = (ctx.key, ctx.spec, int(stride), random_init)
    what = "a random-init copy (seed 0)" if random_init else ctx.name
    with guard(), first_time(cache.trace_data.is_cached(*args),
                             f"Collecting the recurrent states of {what} every {stride} tokens…",
                             f"Recurrent states of {what} collected") as report:
        return cache.trace_data(*args, progress=report)


def traced_every_token(ctx: Context, random_init: bool = False) -> dict:
    """Rank utilization after every token (computed once; the first call may compile the tracker)."""
    args = (ctx.key, ctx.spec, random_init)
    what = "a random-init copy (seed 0)" if random_init else ctx.name
    with guard(), first_time(cache.every_token_data.is_cached(*args),
                             f"Tracking the rank utilization of {what} after every token…",
                             f"Rank utilization of {what} tracked after every token") as report:
        return cache.every_token_data(*args, progress=report)
