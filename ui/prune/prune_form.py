"""The Prune page's inputs: strategy, ratios (uniform or per layer), rounding, readout scale, evaluation
settings, and the plan table they give (drawn; nothing is computed on the model here)."""
from __future__ import annotations

from typing import NamedTuple

import pandas as pd
import streamlit as st

from analysis.archs import adapter_for
from analysis.archs.recurrence_words import words
from analysis.models.channel_group import fp32_state_bytes
from analysis.models.load import TILE_ROWS
from analysis.shrink.prune import usable_strategies
from analysis.shrink.prune_workflow import Evaluation
from analysis.models.key_plan import ROUNDINGS, tiles
from analysis.shrink.sensitivity import shipped_strategies
from analysis.shrink.strategies import STRATEGIES
from ui.shared import shrink, shrink_figures, state, task_inputs
from ui.shared.context import Context
from ui.shared.explain import explainer
from ui.prune import plan_inputs
from ui.prune.ratios import per_layer_ratios


class Choices(NamedTuple):
    strategy: str | None         # None: a "Heads" plan keeps every key channel
    rounding: int | None
    rescale: str
    ratio: float | None          # uniform
    ratios: list[float] | None   # per layer
    head_strategy: str | None = None   # "Heads" and "Both" plans: whole heads removed, chosen by this strategy
    head_ratio: float | None = None    # ... this fraction of each layer's heads (the nearest expressible count)
    map_slot: object = None            # per-layer mode: the place beside the ratio inputs for the compact map


KINDS = {"channels": "Key channels (dk)", "heads": "Heads", "both": "Both"}
# the sensitivity map measures key channels only: said plainly where a plan removes heads
MAP_NOTES = {
    "heads": "The sensitivity map predicts key-channel plans only, so a Heads plan gets no map, no prediction and "
             "no *Verify and choose*: press **Prune** to measure it.",
    "both": "The sensitivity map predicts key-channel plans only: the prediction and *Verify and choose* below "
            "cover this plan's key channels alone (every head kept); what removing the heads costs is measured "
            "only when you press **Prune**."}


def explain(ctx: Context) -> None:
    recurrence = words(adapter_for(ctx.model))
    readout = recurrence.readout_scale_words + (" (fla's default 1/√dₖ′, the reference code's choice, is offered "
                                                "below)" if recurrence.scaled else "")
    explainer(
        "Structured pruning of query/key channels: per linear-attention layer ℓ and key head, the same kept index "
        "set slices the query and key projection rows and their short-convolution channels (and, where the decay is "
        "per key channel, its decay rows; softmax-attention layers of a hybrid are never touched), so the state "
        f"shrinks from dk × dv to dk' × dv: {readout}. Ratios can be uniform or per layer, set beside each layer's "
        "**rank utilization** (one rank profile: the final state of the first calibration sequences, the same one the sensitivity map and *Verify "
        "and choose* use); *Suggest from rank* prunes low-utilization layers more while "
        "keeping the mean ratio at the target. fla's chunk kernel walks dk' in tiles of 64 rows, so the kernel time "
        "follows the tile count ⌈dk'/64⌉: only a dk' that is a multiple of 64 fills every tile, and only crossing a "
        "multiple of 64 saves one. Rounding to 16 or 32 merely avoids odd widths inside a tile (the kernel pads its "
        "blocks to a power of two, at least 16); the last tile stays partly empty. Pruning builds a **new** model "
        "held in this session only; the shared model is never changed. The table compares the model before and "
        "after on the test split (or, for a recall model, recall accuracy); the kernel time is the whole model's "
        "(every layer timed at its own dk').",
        [r"d_k' = d_k\,(1-\rho_\ell),\qquad \text{tiles} = \lceil d_k'/64 \rceil,\qquad "
         r"\text{state bytes} = 4\textstyle\sum_\ell H_\ell\,d_{k,\ell}'\,d_v",
         r"u_\ell = \frac{\|S\|_F^2}{s_1^2\,\min(d_k, d_v)},\qquad "
         r"1-\rho_\ell = \operatorname{clip}\big(c\,u_\ell,\ 1-\rho_{\max},\ 1-\rho_{\min}\big),\quad "
         r"\textstyle\sum_\ell d_{k,\ell}\,\rho_\ell = \bar\rho \sum_\ell d_{k,\ell}",
         r"\mathrm{PPL} = \exp\Big(-\frac{1}{N}\sum_{t} \log p(x_t \mid x_{<t})\Big)"])


DEFAULT_STRATEGY = "wanda"


def default_strategy(name: str, names: list[str]) -> str:
    """The strategy the page opens on: one whose sensitivity map ships with this sample (so the map shows at once),
    Wanda where its map ships or none does."""
    shipped = [n for n in shipped_strategies(name) if n in names]
    return DEFAULT_STRATEGY if DEFAULT_STRATEGY in shipped or not shipped else shipped[0]


def choices(ctx: Context, calib: shrink.CalibrationSettings) -> Choices:
    plan_inputs.apply_pending(ctx.key)  # a plan "Verify and choose" picked, before any input is drawn
    kind = state.field(st.radio, "Plan", "prune_kind", "channels", options=list(KINDS), format_func=KINDS.get,
                       horizontal=True, help="Key channels shrink dk in every head; Heads removes whole heads "
                                             "(pure removal); Both does both in one new model.")
    heads = head_controls() if kind != "channels" else (None, None)
    if kind in MAP_NOTES:
        st.info(MAP_NOTES[kind])
    if kind == "heads":
        return Choices(None, None, shrink.rescale_control(ctx), 0.0, None, *heads)
    names, unusable = usable_strategies(ctx.model)  # PCA is not offered where key channels have their own decay
    c1, c2, c3 = st.columns(3)
    strategy = state.field(c1.selectbox, "Strategy", "prune_strategy", default_strategy(ctx.name, names),
                           options=names, format_func=shrink.strategy_label)
    mode = state.field(c2.radio, "Ratios", "prune_mode", "Uniform", options=["Uniform", "Per layer"], horizontal=True)
    roundings = [r or 0 for r in ROUNDINGS]  # 0 stands for None: a selectbox shows None as "no choice"
    rounding = state.field(c3.selectbox, "Round dk' to kernel tiles", "prune_round", 0, options=roundings,
                           format_func=lambda r: "no rounding" if not r else f"multiple of {r}") or None
    st.caption(STRATEGIES[strategy].description + (
        f" Not offered for {ctx.info.label}: {', '.join(map(shrink.strategy_label, unusable))} (it mixes key "
        "channels, and each key channel here has its own decay)." if unusable else ""))
    rescale = shrink.rescale_control(ctx)
    if mode == "Uniform":
        ratio = state.field(st.slider, "Pruning ratio ρ (all layers)", "prune_ratio", 0.5, 0.0, 0.95, step=0.05)
        return Choices(strategy, rounding, rescale, ratio, None, *heads)
    ratios, beside = per_layer_ratios(ctx, rounding, calib)
    return Choices(strategy, rounding, rescale, None, ratios, *heads, map_slot=beside)


def head_controls() -> tuple[str, float]:
    """The head strategy and the fraction of each layer's heads to remove."""
    from analysis.defaults import HEAD_STRATEGY_NAMES
    from analysis.shrink.heads.strategies import get_head_strategy
    c1, c2 = st.columns(2)
    name = state.field(c1.selectbox, "Head strategy", "prune_head_strategy", "rank-norm", options=HEAD_STRATEGY_NAMES,
                       format_func=lambda n: get_head_strategy(n).label)
    ratio = state.field(c2.slider, "Fraction of each layer's heads removed", "prune_head_ratio", 0.5, 0.05, 0.95,
                        step=0.05)
    st.caption(get_head_strategy(name).description)
    return name, float(ratio)


def plan_table(ctx: Context, choice: Choices, planned: list[int], heads: list[int] | None = None) -> None:
    dims, n_layers = ctx.info.head_k_dims, ctx.info.layers
    before_heads = ctx.info.value_heads_per_layer
    heads = heads or before_heads
    left, right = st.columns([2, 3])
    with left:
        plan = pd.DataFrame({"dk": dims, "ρ": choice.ratios or [choice.ratio] * n_layers, "dk'": planned,
                             "tiles now": tiles(dims), "tiles after": tiles(planned), "heads": before_heads,
                             "heads after": heads}, index=pd.Index(range(n_layers), name="layer"))
        st.table(plan.style.format({"ρ": "{:.3f}"}))
        after = sum(fp32_state_bytes(h, d, ctx.info.head_v_dim) for h, d in zip(heads, planned))
        st.caption(f"{ctx.name} · fp32 state bytes per sequence {ctx.info.state_bytes_per_sequence:,} → {after:,} · "
                   f"kernel tiles of {TILE_ROWS} key rows per head · device {ctx.key.device} · dtype {ctx.key.dtype}")
    with right:
        st.plotly_chart(shrink_figures.key_dim_plan(dims, planned, TILE_ROWS), key="prune_plan")


def evaluation(ctx: Context) -> Evaluation:
    """The page's evaluation settings as the core's one Evaluation (test split; recall pairs for a recall model;
    tasks: lm-evaluation-harness accuracy before and after)."""
    with st.expander("Evaluation settings (test split; kernel timing)", key="prune_evaluation_settings"):  # open across reruns
        e1, e2, e3 = st.columns(3)
        if ctx.task is None:
            context = int(state.field(e1.number_input, "Context (tokens)", "eval_context", 256, 16, 4096, step=64))
            tokens = int(state.field(e2.number_input, "Tokens to score", "eval_tokens", 4096, 64, 10**6, step=1024))
            recall = 0
        else:
            context, tokens = 0, 0
            recall = int(state.field(e1.number_input, "Recall sequences per pair count", "recall_sequences_eval", 64,
                                     8, 4096, step=8))
        timed = state.field(e3.checkbox, "Time the kernel (every layer's key dim)", "prune_latency", True)
        if ctx.task is None:  # a typed value outside a field's range is shown in red and not applied: say what is used
            st.caption(f"In use: context {context}, {tokens:,} tokens to score (a field accepts context 16–4,096 "
                       "and 64–1,000,000 tokens; a red value outside that is not applied).")
    return Evaluation("test", context, tokens, shrink.recall_pairs(ctx), recall, timed,
                      task_inputs.controls(ctx, "prune"))
