"""Channel importance: per-channel scores of each pruning strategy, kept masks, agreement between strategies."""
import json

import streamlit as st

from analysis.data import corpus as data
from analysis.shrink.prune import usable_strategies
from analysis.shrink.strategies import STRATEGIES
from analysis.models.key_plan import plan_key_dims
from ui.shared import frame, notice, shrink, shrink_figures, state
from ui.shared.batches import recall_label
from ui.shared.blocks import head_meaning
from ui.shared.choices import multi_choice
from ui.shared.context import current
from ui.shared.errors import guard
from ui.shared.explain import explainer
from ui.shared.labels import Provenance, caption
from ui.heads import heads_view
from ui.importance import importance_view

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Channel importance")
explainer(
    r"Pruning keeps $d_k' = \lfloor d_k (1 - \rho) \rfloor$ of each head's query/key channels. "
    "Each strategy scores the channels and keeps the best: random, L1 of the weights, Wanda (|W| times the input activation norm), gradient "
    "(Taylor, needs a backward pass), and DRRQR — strong rank-revealing QR on the post-conv activations entering "
    "the recurrence. **PCA is a rotation, not axis-aligned**: it keeps the top principal directions of the keys, "
    "so its bars are the explained variance per direction and it has no channel mask. The **bars** show one "
    "head's scores (kept channels coloured), the **mask** lines the kept sets up side by side, the **agreement** "
    "matrix is the Jaccard overlap of the kept sets, and the **energy** bars show how much of the activations "
    "the kept channels carry. All statistics come from the train split only.",
    [r"\text{L1: } \textstyle\sum_j |W^q_{cj}| + |W^k_{cj}|,\qquad \text{Wanda: } "
     r"\textstyle\sum_j (|W^q_{cj}| + |W^k_{cj}|)\,\|X_j\|_2,\qquad \text{Taylor: } \sum |W \odot \nabla_W \mathcal L|",
     r"d_k' = \lfloor d_k\,(1-\rho) \rfloor,\qquad J(A, B) = \frac{|A\cap B|}{|A\cup B|}",
     r"\text{kept energy} = \operatorname{mean}_{t,h}\ \frac{\|P x_t\|^2}{\|x_t\|^2}\quad "
     r"(x = \text{post-conv query or key},\ P = \text{keep the chosen channels})",
     r"\text{PCA: } \Sigma_k = \operatorname{Cov}(\hat k) = V \Lambda V^\top,\quad W' = V_{:, 1..d_k'}^\top W"
     r"\quad(\text{rotation, not axis-aligned})",
     r"\text{Heads view, joint rank-norm: } z_h(-\overline{\log \mathrm{erank}(S)}) + z_h(\overline{\log \|S\|_F})"
     r"\quad(\text{second half of the calibration sequences; } z_h \text{ over the layer's heads})"])

ctx = current()
settings = shrink.calibration_controls(ctx)
if state.field(st.radio, "View", "importance_view", "Channels", options=["Channels", "Heads"], horizontal=True,
               help="Heads: whole heads scored by the head strategies (analysis.shrink.heads.strategies).") == "Heads":
    heads_view.importance_section(ctx, settings)
    st.stop()
names, unusable = usable_strategies(ctx.model)  # PCA is not offered where key channels have their own decay
chosen = multi_choice("Strategies", names, "importance_strategies", names, format_func=shrink.strategy_label,
                      empty_hint="No strategy picked: choose at least one above (or click one to keep only it).")
if unusable:
    st.caption(f"Not offered for {ctx.info.label}: {', '.join(map(shrink.strategy_label, unusable))} (it mixes key "
               "channels, and each key channel here has its own decay).")
c2, c3, c4 = st.columns([3, 1, 1])
ratio = state.field(c2.slider, "Pruning ratio ρ", "importance_ratio", 0.5, 0.05, 0.95, step=0.05)
n_layers = ctx.info.layers
layer = state.field(c3.selectbox, "Layer", "sel_layer", 0, options=range(n_layers))
layer = min(int(layer), n_layers - 1)
heads = list(range(ctx.info.heads))
head = state.field(c4.selectbox, "Head", "sel_head", 0, options=heads)
if (meaning := head_meaning(ctx.info, "key")) is not None:
    st.caption(meaning)
if not chosen:
    st.stop()

dataset = recall_label(ctx.task, settings.seed) if ctx.task else f"{data.dataset_label('train')} (calibration)"
prov = Provenance(ctx.name, dataset, settings.tokens, settings.sequences, ctx.key.device, ctx.key.dtype)
dk = ctx.info.head_k_dims[layer]
kept_dk = plan_key_dims(ctx.model, ratio=float(ratio))[layer]
st.subheader(f"Scores: layer {layer}, head {head} (keep {kept_dk} of {dk} channels at ρ = {ratio:.2f})")
with guard():  # each strategy's chart as soon as it is scored: the data-free ones before any calibration
    report = importance_view.score_charts(ctx, settings, chosen, float(ratio), layer, head)
st.caption(f"Calibration: {report['calibration']}, computed once for this model and shared by the Shrink pages.")
st.caption(caption(prov, f"layer {layer}, head {head}; coloured = kept at ρ = {ratio:.2f}"))
st.caption(notice.top_channels({shrink.strategy_label(n): report["scores"][n][layer][head] for n in chosen
                                if STRATEGIES[n].axis_aligned}))

aligned = report["strategies"]
st.subheader("Kept masks side by side")
if aligned:
    masks = {shrink.strategy_label(n): report["kept"][n][layer][head] for n in aligned}
    st.plotly_chart(shrink_figures.kept_mask_heatmap(masks, f"Kept channels, layer {layer}, head {head}"),
                    key="kept_masks")
    st.caption(notice.kept_masks(masks))
for name in (n for n in chosen if not STRATEGIES[n].axis_aligned):
    st.caption(f"{shrink.strategy_label(name)} keeps the top {kept_dk} directions, a rotation of all {dk} channels, "
               "so it has no channel mask and is left out of the masks, the agreement and the energy.")

left, right = st.columns(2)
with left:
    st.subheader("Agreement between strategies")
    if len(aligned) >= 2:
        labels = [shrink.strategy_label(n) for n in aligned]
        st.plotly_chart(shrink_figures.agreement_heatmap(labels, report["agreement"],
                                                         "Jaccard overlap of the kept sets"), key="agreement")
        st.caption(caption(prov, "mean over all layers and heads"))
        st.caption(notice.agreement(labels, report["agreement"], kept_dk, dk, f" (layer {layer})"))
    else:
        st.info("Pick two or more axis-aligned strategies to compare their kept sets.")
with right:
    st.subheader("Energy of the kept activations, per layer")
    if aligned:
        tabs = st.tabs(["query", "key"])
        for tab, which in zip(tabs, ("query", "key")):
            energy = {shrink.strategy_label(n): [row[which] for row in report["kept_energy"][n]] for n in aligned}
            tab.plotly_chart(shrink_figures.kept_energy_bars(energy, which, f"Kept {which} energy at ρ = {ratio:.2f}"),
                             key=f"energy_{which}")
            tab.caption(notice.kept_energy(energy, which))
        st.caption(caption(prov, "post-conv activations entering the recurrence, mean over tokens and heads"))

st.download_button("Download scores and kept sets (JSON)", json.dumps({"model": ctx.name, **report}),
                   file_name=f"importance_rho{ratio:.2f}.json", mime="application/json", on_click="ignore")
