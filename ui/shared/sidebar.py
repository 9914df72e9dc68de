"""The sidebar: which model (sample / directory / hub id, device, dtype) and which inputs to analyse.

It only records choices (session keys `model_request` and `input_spec`); loading and errors happen in
the page, after the navigation is drawn, so a bad choice never takes the app down.
"""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st
import torch

from analysis.archs.kernels import dtype_words
from analysis.data import corpus as data, inputs
from analysis.models import budget, load as models
from analysis.errors import AnalysisError
from ui.shared import cache, cluster
from ui.shared.keys import InputSpec
from ui.shared.state import field as state_field

ENV_DEFAULT = "STATE_RANK_DEFAULT_MODEL"
PREFERRED_SAMPLE = "deltanet-small"
SAMPLE, DIRECTORY, HUB = "Bundled sample", "Local directory", "Hub id"
SPLIT_ORDER = ("test", "validation", "train", "wiki")
DEVICES = {"auto": "auto", "CPU": "cpu", "GPU": "cuda"}
DTYPES = ("auto", "float32", "bfloat16")


def default_choice(sample_names: list[str], env_value: str | None) -> tuple[str, str]:
    """(source kind, value) on first open: $STATE_RANK_DEFAULT_MODEL (a sample name or a directory),
    else deltanet-small, else the first bundled sample, else an empty directory field."""
    wanted = (env_value or "").strip() or PREFERRED_SAMPLE
    if wanted in sample_names:
        return SAMPLE, wanted
    if env_value and Path(wanted).expanduser().is_dir():
        return DIRECTORY, wanted
    if sample_names:
        return SAMPLE, sample_names[0]
    return DIRECTORY, ""


def _model_source(samples: dict) -> str:
    kind0, value0 = default_choice(list(samples), os.environ.get(ENV_DEFAULT))
    kinds = (SAMPLE, DIRECTORY, HUB)
    kind = state_field(st.radio, "Model source", "model_kind", kind0, options=kinds)
    if kind == SAMPLE:
        if not samples:
            st.info("No bundled samples are installed yet (sample_models/ is empty); pick a local directory.")
            return ""
        names = list(samples)
        name = state_field(st.selectbox, "Sample", "sample", value0 if kind0 == SAMPLE else names[0], options=names)
        info = samples[name]
        st.caption(f"**{name}** ({models.type_label(info.model_type)}): "
                   f"{info.description or 'no description'}")
        return name
    if kind == DIRECTORY:
        path = state_field(st.text_input, "Model directory", "model_dir", value0 if kind0 == DIRECTORY else "",
                           placeholder="/path/to/folder written by save_pretrained")
        return path.strip()
    hub = state_field(st.text_input, "Hub id", "hub_id", "", placeholder="org/name")
    st.caption("Hub ids are fetched from huggingface.co (needs internet; safetensors only).")
    return hub.strip()


def _device_and_dtype() -> tuple[str, str]:
    has_gpu = torch.cuda.is_available()
    options = list(DEVICES) if has_gpu else ["auto", "CPU"]
    label = state_field(st.radio, "Device", "device", "auto", options=options, horizontal=True)
    if not has_gpu:
        st.caption("GPU unavailable: torch.cuda.is_available() is False here (CPU-only torch build or no "
                   "driver), so the project's pure-torch path runs the model on CPU.")
    dtype = state_field(st.selectbox, "dtype", "dtype", "auto", options=DTYPES,
                        help=f"auto: float32 on CPU; {dtype_words()}.")
    return DEVICES[label], dtype


def _max_memory() -> int | None:
    """The memory budget this session's work may use beyond the server's baseline; empty: half of the memory
    available. A model whose weights do not fit is read one block at a time."""
    text = state_field(st.text_input, "Max memory", "max_memory", "", placeholder="e.g. 4GiB (empty: half of free)",
                       help="What this session's work may use beyond the server's own memory, e.g. 4GiB or 500MiB. "
                            "A model whose weights do not fit is read one block at a time from its safetensors "
                            "files (the Model page says so); recovery and training need the whole model.")
    if not text.strip():
        return None
    try:
        return budget.parse_size(text)
    except AnalysisError as exc:
        st.error(str(exc).replace("--max-memory", "Max memory"))
        return None


def _recall_task(request):
    try:
        return cache.recall_task(cache.resolve(*request))
    except AnalysisError:
        return None  # the page shows the error


def _tokenizer_caption(request) -> None:
    """Say which tokenizer reads the text when the model directory brings none."""
    try:
        note = models.tokenizer_note(cache.resolve(*request).path)
    except AnalysisError:
        return  # the page shows the error
    if note:
        st.caption(note)


def _fit_text(request, text: str, tokens: int, sequences: int) -> tuple[int, int]:
    """A pasted text shorter than tokens × sequences is read whole (fewer or shorter sequences), with a caption
    saying so, instead of failing until two fields are changed."""
    try:
        tok = cache.tokenizer(cache.resolve(*request).path)
        available = len(inputs.first_token_ids(tok, inputs.resolve_text(text=text), tokens * sequences))
    except AnalysisError:
        return tokens, sequences  # the page shows the error
    fitted = inputs.fit_windows(available, tokens, sequences)
    if fitted != (tokens, sequences) and available:
        st.caption(f"The pasted text has {available} tokens, fewer than the {sequences} × {tokens} set above: "
                   f"it is read as {fitted[1]} sequence{'s' if fitted[1] != 1 else ''} of {fitted[0]} tokens.")
    return fitted


def _inputs(request) -> InputSpec:
    task = _recall_task(request) if request[0] else None
    if task is not None:
        st.info(f"This is a recall model: it has no tokenizer and reads synthetic associative-recall sequences "
                f"({task.n_pairs} key→value pairs, then {task.n_queries} queries; {task.seq_len} tokens each) "
                "instead of text.")
        sequences = state_field(st.number_input, "Recall sequences", "recall_sequences", 8, 1, 256, step=1)
        seed = state_field(st.number_input, "Sequence seed", "recall_seed", 0, 0, 10**6, step=1)
        return InputSpec("recall", tokens=task.seq_len, sequences=int(sequences), seed=int(seed))
    kind = state_field(st.radio, "Text", "text_kind", "Bundled split", options=("Bundled split", "Pasted text"),
                       horizontal=True)
    _tokenizer_caption(request)
    split, text = "test", ""
    if kind == "Bundled split":
        split = state_field(st.selectbox, "Split", "split", "test", options=SPLIT_ORDER, format_func=data.dataset_label)
    else:
        text = state_field(st.text_area, "Text to analyse", "pasted_text", "", height=120,
                           placeholder="Paste at least tokens × sequences tokens of text")
    tokens = state_field(st.number_input, "Tokens per sequence", "tokens", 256, 8, 8192, step=64)
    sequences = state_field(st.number_input, "Number of sequences", "sequences", 4, 1, 64, step=1)
    if kind == "Pasted text" and text.strip():
        tokens, sequences = _fit_text(request, text, int(tokens), int(sequences))
    return InputSpec("text" if kind == "Pasted text" else "split", split=split, text=text, tokens=int(tokens),
                     sequences=int(sequences))


def render() -> None:
    """Draw the sidebar and record the choices for the pages."""
    found, skipped = models.scan_samples()
    samples = {s.name: s for s in found}
    with st.sidebar:
        st.header("Model")
        if skipped:
            st.warning("Skipped unreadable bundled samples: "
                       + "; ".join(f"{name} ({reason})" for name, reason in skipped) + ".")
        source = _model_source(samples)
        device, dtype = _device_and_dtype()
        max_memory = _max_memory()
        budget.set_budget(max_memory)  # this rerun's size checks; jobs carry it into their threads (ui.shared.job_runner)
        st.session_state["model_request"] = (source, device, dtype, max_memory)
        if cluster.executor().on_ray:  # the server was started with a cluster: say where the jobs' points go
            st.caption(f"Multi-point jobs (map, Verify, sweeps): {cluster.where()}.")
        st.header("Inputs")
        st.session_state["input_spec"] = _inputs((source, device, dtype, max_memory))
