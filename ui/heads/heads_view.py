"""The heads study on the pages: head groups on States & rank, the Heads view of Channel importance, and the
partner head of the State lab. Computed by the core's one workflow (analysis.runs.head_study) with the CLI's
defaults (`python -m analysis heads MODEL`: three inputs, 4 × 256 tokens each, seed 0), so the page and the
CLI's JSON show the same groups; stored once per server process (ui.shared.memo) and shared read-only."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from analysis.defaults import HEAD_STRATEGY_NAMES
from analysis.runs.head_study import heads_study
from analysis.shrink.heads.importance import head_importance_report
from analysis.shrink.heads.strategies import get_head_strategy
from ui.shared import cache, memo, shrink, shrink_figures, state
from ui.shared.choices import multi_choice
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.keys import ModelKey
from ui.shared.progress import first_time
from ui.heads import heads_figures

TOKENS, SEQUENCES, SEED = 256, 4, 0   # the CLI's defaults


@memo.memoized("heads_study", max_entries=4)
def study(key: ModelKey, tokens: int = TOKENS, sequences: int = SEQUENCES, seed: int = SEED, *, progress) -> dict:
    task = cache.recall_task(key)
    with cache.compute_lock():
        return heads_study(cache.shared_model(key), None if task is not None else cache.tokenizer(key.path), None,
                           tokens, sequences, seed, progress=progress)


def studied(ctx: Context) -> dict:
    with guard(), first_time(study.is_cached(ctx.key), "Tracing every head on three inputs…",
                             "Heads traced on three inputs") as report:
        return study(ctx.key, progress=report)


def states_section(ctx: Context, layer: int) -> None:
    """States & rank: one layer's heads over token positions, coloured by group, with the split and its stability."""
    st.subheader("Head groups (state-rank stratification)")
    if not state.field(st.toggle, "Split each layer's heads into low- and high-rank groups on three inputs",
                       "heads_groups", False, help="Effective rank of every head's state over the token positions "
                       "on three inputs; each layer's heads are cut at the largest gap of their mean log effective "
                       "rank over the second half; the same split on every input means the group is the head's own."):
        return
    data = studied(ctx)
    row = data["layers"][layer]
    groups = [[h["texts"][t]["group"] for h in row["heads"]] for t in range(len(data["texts"]))]
    traj = [per_text[layer] for per_text in data["trajectories"]]
    left, right = st.columns([3, 2])
    with left:
        st.plotly_chart(heads_figures.head_trajectories(data["positions"], traj, groups, data["texts"],
                                                        f"Layer {layer}: effective rank of each head's state"),
                        key="heads_trajectories")
    with right:
        st.table(split_table(row, data["texts"]))
        st.metric("Heads with the same group on every input", f"{row['agreement']:.0%}",
                  help="Agreement a: Cohen's chance-corrected agreement of the groups, mean over pairs of inputs (1: the same "
                       "groups on every input; 0: no more alike than chance): "
                       + ("n/a" if row["kappa"] is None else f"{row['kappa']:.2f}"))
    st.caption(f"{ctx.name} · inputs: {'; '.join(data['texts'])} · {data['sequences']} × {data['tokens']} tokens each "
               f"· line dash = input, colour = group on that input · device {ctx.key.device} · dtype "
               f"{ctx.key.dtype} · as `python -m analysis heads` computes it")
    st.caption("Notice: " + data["notice"][layer] + ".")


def split_table(row: dict, texts: list[str]) -> pd.DataFrame:
    """Per input: the heads below and above the cut, the gap (as a factor in effective rank) and its ratio."""
    import math
    out = []
    for t, (text, split) in enumerate(zip(texts, row["splits"])):
        low = [h["head"] for h in row["heads"] if h["texts"][t]["group"] == "low"]
        high = [h["head"] for h in row["heads"] if h["texts"][t]["group"] == "high"]
        gap = split.get("gap")
        out.append({"input": text.split(" (")[0], "low-rank heads": ", ".join(map(str, low)),
                    "high-rank heads": ", ".join(map(str, high)),
                    "gap (× erank)": "n/a" if gap is None else f"×{math.exp(gap):.2f}",
                    "gap ratio": "n/a" if split.get("gap_ratio") is None else f"{split['gap_ratio']:.2f}"})
    return pd.DataFrame(out).set_index("input")


@memo.memoized("head_importance", max_entries=8)
def importance(key: ModelKey, settings: shrink.CalibrationSettings, names: tuple, ratio: float, *, progress) -> dict:
    calib = shrink.calibration(key, settings)
    with cache.compute_lock():
        return head_importance_report(cache.shared_model(key), calib, list(names), ratio, settings.seed,
                                      progress=progress)


def importance_section(ctx: Context, settings: shrink.CalibrationSettings) -> None:
    """Channel importance, Heads view: each head strategy's scores per head, the heads it keeps, agreement."""
    label = lambda n: get_head_strategy(n).label  # noqa: E731
    chosen = multi_choice("Head strategies", HEAD_STRATEGY_NAMES, "head_strategies", ["rank-norm", "rank", "norm",
                          "random"], format_func=label, empty_hint="No head strategy picked: choose at least one.")
    c1, c2 = st.columns([3, 1])
    ratio = state.field(c1.slider, "Fraction of each layer's heads removed", "head_ratio", 0.5, 0.05, 0.95, step=0.05)
    layer = min(int(state.field(c2.selectbox, "Layer", "sel_layer", 0, options=range(ctx.info.layers))),
                ctx.info.layers - 1)
    if not chosen:
        st.stop()
    with guard():
        shrink.prepare(ctx.key, settings, False)
        args = (ctx.key, settings, tuple(chosen), float(ratio))
        with first_time(importance.is_cached(*args), "Scoring the heads…", "Heads scored") as report:
            data = importance(*args, progress=report)
    keep = data["head_counts"][layer]
    st.plotly_chart(heads_figures.head_scores({n: data["scores"][n][layer] for n in chosen},
                                              {n: data["kept"][n][layer] for n in chosen}, data["labels"],
                                              f"Head scores, layer {layer} (filled: kept, {keep} heads)"),
                    key="head_scores")
    st.caption(f"{ctx.name} · calibration: {data['calibration']} · " + " · ".join(
        f"{data['labels'][n]}: {data['units'][n]}" for n in chosen) + f" · device {ctx.key.device}")
    left, right = st.columns(2)
    with left:
        kept = pd.DataFrame({data["labels"][n]: [", ".join(map(str, k)) for k in data["kept"][n]] for n in chosen},
                            index=pd.Index(range(ctx.info.layers), name="layer"))
        st.table(kept)
        st.caption(f"Value heads kept per layer: {data['head_counts']} (the count nearest (1 − {ratio:.2f}) × heads "
                   "that every kept key head can serve evenly).")
    with right:
        if len(chosen) >= 2:
            st.plotly_chart(shrink_figures.agreement_heatmap([data["labels"][n] for n in chosen], data["agreement"],
                                                             "Jaccard overlap of the kept heads"), key="head_agreement")
            st.caption("Mean over layers of |A∩B| / |A∪B| of the kept value heads.")


def partner_head(ctx: Context, layer: int, head: int) -> tuple[int, str, str] | None:
    """(head of the other group in this layer, its group, this head's group) from the heads study, the most
    extreme one on the first input; None when the layer has one group only."""
    row = studied(ctx)["layers"][layer]
    mine = row["heads"][head]["group"]
    others = [h for h in row["heads"] if h["group"] not in (mine, "single")]
    if not others:
        return None
    pick = (max if mine == "low" else min)(others, key=lambda h: h["texts"][0]["mean_log_effective_rank_late"])
    return pick["head"], pick["group"], mine
