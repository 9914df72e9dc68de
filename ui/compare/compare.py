"""Original vs pruned side by side: the "Compare with" picker that States & rank and Query noise share, the
comparison model it resolves, its states on the loaded model's own token ids, and the difference table.

The comparison model is this session's result from the Prune page, or that result after the Prune page's
recovery (both kept in the session, never shared, on the loaded model's device and dtype: pruning and recovery
keep them), or a saved directory (loaded read-only through ui.shared.cache on the loaded model's device and dtype).
None is ever mutated: state collection only reads it, under ui.shared.cache.compute_lock. Each has its own cache
identity (Side.id), so the recovered model's states are never taken for the plain pruned model's.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from analysis.models import load as models
from analysis.models.comparable import check_comparable
from analysis.errors import AnalysisError
from analysis.io.writes import show
from ui.shared import cache, state
from ui.shared.batches import display_name
from ui.shared.context import Context, traced, traced_every_token
from ui.shared.errors import guard
from ui.shared.labels import Provenance, caption
from ui.shared.made import pruned_run, take_recovery
from ui.shared.progress import first_time
from ui.shared.sides import Side
from ui.compare.compare_table import GAIN_SNR_DB, delta_table

NONE, PRUNED, RECOVERED, DIRECTORY = "none", "pruned", "recovered", "directory"
CHOICE_LABELS = {NONE: "none", PRUNED: "the model pruned on the Prune page",
                 RECOVERED: "the pruned model after recovery on the Prune page", DIRECTORY: "a saved model directory"}


def original(ctx: Context) -> Side:
    return Side("", ctx.name, "original", ctx.model, ctx.info)


def picker(ctx: Context) -> Side | None:
    """Draw "Compare with" (and the directory field when asked); the comparison Side, or None. A directory that
    cannot be compared gets one st.error sentence and the page goes on without a comparison."""
    run = pruned_run()
    has_run = bool(run) and run["key"] == ctx.key
    recovered = take_recovery(run) if has_run else None
    options = [NONE] + ([PRUNED] if has_run else []) + ([RECOVERED] if recovered else []) + [DIRECTORY]
    gone = _gone_sentence(st.session_state.get("w:compare_with", state.get("compare_with", NONE)), options, has_run)
    c1, c2 = st.columns([1, 2])
    choice = state.field(c1.selectbox, "Compare with", "compare_with", NONE, options=options,
                         format_func=lambda c: recovery_label(recovered) if c == RECOVERED else CHOICE_LABELS[c],
                         help="Show the loaded model next to a pruned version on the same text and token settings: "
                              "the same layer/head views in two columns, and what changed.")
    if gone:
        st.info(gone)
    if choice in (PRUNED, RECOVERED):
        return _prune_page_side(ctx, run, recovered if choice == RECOVERED else None)
    if choice != DIRECTORY:
        return None
    text = state.field(c2.text_input, "Saved model directory", "compare_dir", "",
                       placeholder="/path/to/a pruned model saved by the Prune page").strip()
    if not text:
        c2.caption("Enter the folder of a saved pruned version of the loaded model.")
        return None
    try:
        return _directory_side(ctx, text)
    except AnalysisError as exc:
        st.error(str(exc))
        return None


def _prune_page_side(ctx: Context, run: dict, recovered: dict | None) -> Side:
    """The Prune page's pruned model, or (`recovered` given) that model after its recovery: each under its own
    cache identity (the prune run's id, the recovery's id), so one's states are never shown for the other."""
    result = run["result"]
    pruned = f"{result.info['label']}, dk {result.original_dims} → {result.dims}"
    if recovered is None:
        return Side(f"pruned:{run['id']}", f"{ctx.name} pruned on the Prune page ({pruned})", "pruned",
                    result.model, models.describe(result.model))
    name = f"{ctx.name} pruned and recovered on the Prune page ({pruned}; {_recovery_words(recovered)})"
    return Side(f"recovered:{recovered['id']}", name, "recovered", recovered["model"],
                models.describe(recovered["model"]))


def recovery_label(recovered: dict) -> str:
    """'pruned + lora-kd recovery (20 steps)': the picker's name for the Prune page's recovered model."""
    return f"pruned + {_recovery_words(recovered)}"


def _recovery_words(recovered: dict) -> str:
    # a run from before the method was recorded trained the q/k rows (as the Prune page's table says)
    return f"{recovered.get('method') or 'qk'} recovery ({recovered['steps']} steps)"


def _gone_sentence(wanted: str, options: list, has_run: bool) -> str:
    """Why a remembered Prune-page choice is no longer offered ('' when it still is): the page falls back to
    none and says so once."""
    if wanted in options or wanted not in (PRUNED, RECOVERED):
        return ""
    if not has_run:
        return ("The Prune page has no pruned version of the loaded model in this session, so Compare with is back "
                "to none; prune it there (or pick a saved model directory) to compare again.")
    return ("The recovered model you compared with belonged to an earlier prune and the Prune page's new pruned "
            "model has no recovery yet, so Compare with is back to none; run a recovery there to compare its result.")


def _directory_side(ctx: Context, text: str) -> Side:
    path = Path(text).expanduser()
    if not path.is_dir():  # never a hub id here: a comparison is a local folder
        raise AnalysisError(f"{show(text, 160)!r} is not a directory; enter the folder of a saved model "
                            "(the Prune page's Save writes one).")
    key = cache.resolve(str(path), ctx.key.device, ctx.key.dtype, ctx.key.max_memory)
    with st.spinner(f"Loading {path} on {key.device} ({key.dtype})…"):
        model = cache.shared_model(key)
    name = display_name(key.path)
    problem = _problem(ctx.key, key, ctx.model, model, ctx.name, name)
    if problem:
        raise AnalysisError(problem)
    info = models.describe(model)
    role = "comparison" if info.head_k_dims == ctx.info.head_k_dims else "pruned"  # never "pruned" when it is not
    return Side(f"dir:{key.path}", name, role, model, info)


@st.cache_data(max_entries=16, show_spinner=False)
def _problem(key, other_key, _loaded, _other, loaded_name: str, other_name: str) -> str:
    """The sentence that says why the two models cannot be compared ('' when they can); checked once per pair."""
    try:
        check_comparable(_loaded, _other, loaded_name, other_name)
    except AnalysisError as exc:
        return str(exc)
    return ""


def traced_side(ctx: Context, side: Side, stride: int) -> dict:
    """A side's states on the loaded model's inputs (the loaded model's own trace for the original)."""
    if not side.id:
        return traced(ctx, stride)
    args = (ctx.key, ctx.spec, int(stride), side.id)
    with guard(), first_time(cache.compare_trace_data.is_cached(*args),
                             f"Collecting the recurrent states of {side.name} every {stride} tokens…",
                             f"Recurrent states of {side.name} collected") as report:
        return cache.compare_trace_data(*args, _model=side.model, progress=report)


def traced_side_every_token(ctx: Context, side: Side) -> dict:
    if not side.id:
        return traced_every_token(ctx)
    args = (ctx.key, ctx.spec, side.id)
    with guard(), first_time(cache.compare_every_token_data.is_cached(*args),
                             f"Tracking the rank utilization of {side.name} after every token…",
                             f"Rank utilization of {side.name} tracked after every token") as report:
        return cache.compare_every_token_data(*args, _model=side.model, progress=report)


def provenance(ctx: Context, side: Side, data: dict) -> Provenance:
    return Provenance(f"{side.name} ({side.role}, {side.dims})", data["dataset"], data["tokens"], data["sequences"],
                      ctx.key.device, ctx.key.dtype)


def _tint(value, worse_if_negative: bool) -> str:
    """Red where the comparison is worse, green where better (blank for no change or no number)."""
    if value != value or abs(value) < 1e-9:
        return ""
    worse = (value < 0) == worse_if_negative
    return "background-color: rgba(214, 39, 40, 0.25)" if worse else "background-color: rgba(44, 160, 44, 0.25)"


def delta_section(ctx: Context, sides: tuple[Side, Side], traces: tuple[dict, dict]) -> pd.DataFrame:
    """The per-layer/head table of what changed (dk → dk′, Δ effective rank, Δ noise gain), tinted by
    direction."""
    (a, b), (data_a, data_b) = sides, traces
    st.subheader(f"What changed: {b.role} vs original, every layer and head")
    table = delta_table(data_a, data_b, a.info.head_k_dims, b.info.head_k_dims, b.role)
    numbers = [c for c in table.columns if c not in ("layer", "head", "dk → dk′")]
    styled = (table.style.format("{:.4g}", subset=numbers)
              .map(lambda v: _tint(v, worse_if_negative=True), subset=["Δ effective rank"])
              .map(lambda v: _tint(v, worse_if_negative=False), subset=["Δ noise gain"]))
    st.dataframe(styled, hide_index=True, key="compare_delta_table")
    st.caption(caption(provenance(ctx, a, data_a),
                       f"beside {b.name} ({b.dims}) on the same token ids · final state after token "
                       f"{data_a['tokens'] - 1} · effective rank: mean over {data_a['sequences']} sequences · noise "
                       f"gain: relative RMS retrieval error of the last real keys, raw query at {GAIN_SNR_DB:g} dB "
                       f"SNR (exact), median over the sequences · Δ = {b.role} − original; red: fewer directions or "
                       "more noise, green: the opposite"))
    return table
