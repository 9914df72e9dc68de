"""The State lab's cached computations: one observation per (model, text), one trace per head, computed once per
server process (ui.shared.memo: shared, read-only), so a scrubber step only indexes them; and the prepared texts
with the callbacks that keep the prepared-sentence box and the text box in step."""
from __future__ import annotations

import streamlit as st

from analysis.inspect import state_lab as lab
from analysis.shrink.head_channels import head_channels
from analysis.shrink.strategies import get_strategy
from ui.shared import cache, memo, state
from ui.shared.keys import InputSpec, ModelKey

PREPARED = {
    "Repetition": "The cat sat on the mat. The dog sat on the rug. The cat sat on the mat again, and the dog slept.",
    "Facts to remember": "Alice lives in Paris. Bob lives in Rome. Carol lives in Oslo. Where does Bob live? Bob lives in",
    "Shakespeare": "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings "
                   "and arrows of outrageous fortune, or to take arms against a sea of troubles.",
    "Counting": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen",
}
OWN_TEXT = "(your own text)"  # what the prepared-sentence box shows once the text is not one of PREPARED


def prepared_text(name: str) -> str:
    return PREPARED.get(name, next(iter(PREPARED.values())))


def prepared_picked() -> None:
    """Callback of the prepared-sentence box: a prepared sentence replaces the text; "your own text" keeps it."""
    name = st.session_state["w:lab_prepared"]
    if name in PREPARED:
        state.choose("lab_text", PREPARED[name])


def text_typed() -> None:
    """Callback of the text box: the prepared-sentence box names what the box now holds."""
    text = st.session_state["w:lab_text"]
    state.choose("lab_prepared", next((name for name, t in PREPARED.items() if t == text), OWN_TEXT))


CALIBRATION = (16, 256, 0)  # the Channel importance page's default calibration (sequences, tokens, seed)


@memo.memoized("state_lab_observation", max_entries=8)
def observation(key: ModelKey, text: str, *, progress) -> lab.Observation:
    """Every linear layer's recurrence inputs for `text` (a recall model reads one recall sequence instead)."""
    model = cache.shared_model(key)
    task = cache.recall_task(key)
    progress(0.0, "tokenizing the text")
    if task is not None:
        from ui.shared.batches import token_batch
        ids = token_batch(model, None, InputSpec("recall", sequences=1), task)[0][0]
        names = [str(int(i)) for i in ids]
    else:
        tok = cache.tokenizer(key.path)
        ids = lab.text_ids(tok, text)
        names = [tok.decode([int(i)]) for i in ids]
    progress(0.3, f"one forward pass over {len(ids)} tokens, keeping every layer's q, k, v, β, g")
    with cache.compute_lock():
        return lab.observe(model, ids, names)


@memo.memoized("state_lab_head", max_entries=8)  # up to ~30 MB each at 512 tokens (3 rules × T states)
def head_traces(key: ModelKey, text: str, layer: int, head: int, *, progress) -> dict:
    obs = observation(key, text, progress=progress)
    progress(0.6, f"layer {layer}, head {head}: the state after every token under three rules, spectra, retrieval")
    return {"inputs": (x := lab.head_inputs(obs, layer, head)), "traces": lab.trace_head(x)}


@memo.memoized("state_lab_synthetic", max_entries=32)
def synthetic_traces(pattern: str, dk: int, n_tokens: int, beta: float, decay: float, overlap: float = 0.9, *,
                     progress) -> dict:
    x = lab.synthetic_inputs(pattern, dk, n_tokens, beta, decay, overlap)
    return {"inputs": x, "traces": lab.trace_head(x)}


@memo.memoized("state_lab_pruned", max_entries=8)
def pruned_traces(key: ModelKey, text: str, layer: int, head: int, strategy: str, ratio: float, *, progress) -> dict:
    """The same head with dk′ = round(dk(1 − ratio)) channels kept by `strategy` (its calibration if it needs one)."""
    obs = observation(key, text, progress=progress)
    calib = None
    if get_strategy(strategy).needs_calibration:
        from ui.shared.shrink import CalibrationSettings, calibration
        progress(0.2, "calibration for the strategy (16 × 256 train tokens, as Channel importance)")
        calib = calibration(key, CalibrationSettings(*CALIBRATION))
    progress(0.7, f"choosing the kept channels ({strategy}) and re-running the rules")
    with cache.compute_lock():
        sel = head_channels(cache.shared_model(key), strategy, ratio, layer, lab.key_head_of(obs, layer, head), calib)
    x = lab.pruned_inputs(lab.head_inputs(obs, layer, head), sel, f"{strategy}, ratio {ratio:g}")
    return {"inputs": x, "traces": lab.trace_head(x)}
