"""The sidebar: which model (sample / directory / hub id, device, dtype) and which inputs to analyse.

It only records choices (session keys `model_request` and `input_spec`); loading and errors happen in
the page, after the navigation is drawn, so a bad choice never takes the app down.
"""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st
import torch

from analysis import data, models
from analysis.errors import AnalysisError
from ui import cache
from ui.keys import InputSpec
from ui.state import remember, remembered

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
    kind = st.radio("Model source", kinds, key=remembered("model_kind", kind0, kinds))
    remember("model_kind")
    if kind == SAMPLE:
        if not samples:
            st.info("No bundled samples are installed yet (sample_models/ is empty); pick a local directory.")
            return ""
        names = list(samples)
        name = st.selectbox("Sample", names, key=remembered("sample", value0 if kind0 == SAMPLE else names[0], names))
        remember("sample")
        info = samples[name]
        st.caption(f"**{name}** ({models.type_label(info.model_type)}): "
                   f"{info.description or 'no description'}")
        return name
    if kind == DIRECTORY:
        path = st.text_input("Model directory", key=remembered("model_dir", value0 if kind0 == DIRECTORY else ""),
                             placeholder="/path/to/folder written by save_pretrained")
        remember("model_dir")
        return path.strip()
    hub = st.text_input("Hub id", key=remembered("hub_id", ""), placeholder="org/name")
    remember("hub_id")
    st.caption("Hub ids are fetched from huggingface.co (needs internet; safetensors only).")
    return hub.strip()


def _device_and_dtype() -> tuple[str, str]:
    has_gpu = torch.cuda.is_available()
    options = list(DEVICES) if has_gpu else ["auto", "CPU"]
    label = st.radio("Device", options, key=remembered("device", "auto", options), horizontal=True)
    remember("device")
    if not has_gpu:
        st.caption("GPU unavailable: torch.cuda.is_available() is False here (CPU-only torch build or no "
                   "driver), so the project's pure-torch path runs the model on CPU.")
    dtype = st.selectbox("dtype", DTYPES, key=remembered("dtype", "auto", DTYPES),
                         help="auto: float32 on CPU; on a GPU the family kernel's default (bfloat16; fla's DeltaNet "
                              "chunk kernel refuses float32).")
    remember("dtype")
    return DEVICES[label], dtype


def _recall_task(request):
    try:
        return cache.recall_task(cache.resolve(*request))
    except AnalysisError:
        return None  # the page shows the error


def _inputs(request) -> InputSpec:
    task = _recall_task(request) if request[0] else None
    if task is not None:
        st.info(f"This is a recall model: it has no tokenizer and reads synthetic associative-recall sequences "
                f"({task.n_pairs} key→value pairs, then {task.n_queries} queries; {task.seq_len} tokens each) "
                "instead of text.")
        sequences = st.number_input("Recall sequences", 1, 256, key=remembered("recall_sequences", 8), step=1)
        remember("recall_sequences")
        seed = st.number_input("Sequence seed", 0, 10**6, key=remembered("recall_seed", 0), step=1)
        remember("recall_seed")
        return InputSpec("recall", tokens=task.seq_len, sequences=int(sequences), seed=int(seed))
    kind = st.radio("Text", ("Bundled split", "Pasted text"), key=remembered("text_kind", "Bundled split"),
                    horizontal=True)
    remember("text_kind")
    split, text = "test", ""
    if kind == "Bundled split":
        split = st.selectbox("Split", SPLIT_ORDER, format_func=data.dataset_label,
                             key=remembered("split", "test", SPLIT_ORDER))
        remember("split")
    else:
        text = st.text_area("Text to analyse", key=remembered("pasted_text", ""), height=120,
                            placeholder="Paste at least tokens × sequences tokens of text")
        remember("pasted_text")
    tokens = st.number_input("Tokens per sequence", 8, 8192, key=remembered("tokens", 256), step=64)
    remember("tokens")
    sequences = st.number_input("Number of sequences", 1, 64, key=remembered("sequences", 4), step=1)
    remember("sequences")
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
        st.session_state["model_request"] = (source, device, dtype)
        st.header("Inputs")
        st.session_state["input_spec"] = _inputs((source, device, dtype))
