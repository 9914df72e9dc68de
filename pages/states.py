"""States & rank: a layer × head map of one rank metric, then one head's metric over tokens and its spectrum."""
import streamlit as st

from analysis.linalg.rank import METRIC_INFO
from analysis.linalg.rank_card import HEADLINE
from ui.shared import frame, scales, state
from ui.shared.blocks import head_meaning, hybrid_note
from ui.shared.context import current, traced
from ui.shared.explain import explainer
from ui.shared.reduce import mean_std
from ui.compare import compare as side_by_side
from ui.compare import compare_views
from ui.heads import heads_view
from ui.states import states_views

TAU = scales.TAU  # the numerical-rank threshold of the collected metrics (ui.shared.cache uses the core's default)

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("States & rank")
explainer(
    r"The model reads the chosen text; after every token each head's state $S \in \mathbb{R}^{d_k \times d_v}$ "
    r"is a matrix whose singular values $s_1 \ge \dots \ge s_m$, $m = \min(d_k, d_v)$, say how many independent "
    "key→value directions it holds. "
    "The **heatmap** shows the chosen metric of the state after the last token, averaged over the sequences; "
    "click a cell (or pick it below) to see that head's metric **over token position** (mean ± one standard "
    "deviation across sequences) and its **singular spectrum** at chosen positions. "
    "*Compare with random init* overlays the same architecture with random weights (seed 0): what training changed. "
    "*Compare with* a pruned version (from the Prune page or a saved directory) shows both models on the same token "
    "ids in two columns, with the difference map and a per-layer/head table of what pruning changed. "
    "The numerical rank and the condition number use the threshold "
    rf"$\tau = {TAU:g}$, so $\kappa_\tau \le 1/\tau = {1 / TAU:g}$.",
    [rf"\text{{{info.label}}}:\quad {info.formula}" for info in METRIC_INFO.values()],
    "Zero state: every rank is 0. Non-finite states give NaN (shown as gaps).")

ctx = current()
if ctx.task is not None:
    st.info("This recall model has no tokenizer: the states below come from synthetic recall sequences "
            "(set their number and seed in the sidebar), not from text.")

other = side_by_side.picker(ctx)  # a pruned version beside the loaded model, or None
c1, c2, c3, c4 = st.columns([2, 1, 1.3, 1.5])
metric = state.field(c1.selectbox, "Metric", "metric", HEADLINE, options=list(METRIC_INFO),
                     format_func=lambda k: METRIC_INFO[k].label + (" — directions used" if k == HEADLINE else ""))
stride = state.field(c2.number_input, "Stride (tokens)", "stride", 8, 1, 1024, step=1,
                     help="Collect the state every `stride` tokens (plus after the last token).")
compare = state.field(c4.toggle, "Compare with random init", "compare_random", False, disabled=other is not None,
                      help="One comparison at a time: set “Compare with” to none first." if other is not None else None)
compare = compare and other is None

data = traced(ctx, stride)
rand = traced(ctx, stride, random_init=True) if compare else None
sides = (side_by_side.original(ctx), other) if other else ()
data_other = side_by_side.traced_side(ctx, other, stride) if other else None
prov = side_by_side.provenance(ctx, sides[0], data) if other else ctx.provenance(data)
prov_other = side_by_side.provenance(ctx, other, data_other) if other else None
values = data["metrics"][metric]                     # [L, B, H, P]
n_layers, _, n_heads, _ = values.shape
final, _ = mean_std(values[..., -1], axis=1)         # [L, H]: last position, mean over sequences
if (note := hybrid_note(ctx.info)) is not None:
    st.caption(note)
if (meaning := head_meaning(ctx.info, "value")) is not None:
    st.caption(meaning)

layer, head = states_views.clicked_cell(n_layers, n_heads)  # a click on the heatmap picks the drill-in

final_rand = mean_std(rand["metrics"][metric][..., -1], axis=1)[0] if rand else None
final_other = mean_std(data_other["metrics"][metric][..., -1], axis=1)[0] if other else None
max_rank = max(s.shape[-1] for s in data["singular_values"])  # m = min(dk, dv), largest over layers
scale = state.field(c3.radio, "Colour scale", "colour_scale", scales.DATA, options=scales.CHOICES,
                    format_func=lambda c: scales.choice_label(c, metric, max_rank, TAU, compare or other is not None),
                    help="Data range: the colours span the values shown (one range for both maps when comparing). "
                         "Full range: the metric's possible range (0–1 for rank utilization, 0–m for ranks, "
                         "up to 1/τ for κ), so small differences look small.")
second = [m for m in (final_rand, final_other) if m is not None]
zrange = scales.colour_range(scale, metric, [final] + second, max_rank, TAU)
states_views.final_maps(ctx, sides, (data, rand, data_other), (prov, prov_other), (final, final_rand, final_other),
                        metric, (layer, head), zrange, max_rank)
if other:
    compare_views.difference_map(ctx, sides, data, data_other, (layer, head))
    side_by_side.delta_section(ctx, sides, (data, data_other))

st.subheader("Drill in")
c1, c2, c3 = st.columns([1, 1, 3])
layer = state.field(c1.selectbox, "Layer", "sel_layer", 0, options=range(n_layers),
                    format_func=compare_views.layer_label(sides))
head = state.field(c2.selectbox, "Head", "sel_head", 0, options=range(n_heads))
with c3:
    chosen = states_views.spectrum_positions(data["positions"], stride)

every_token = False
if metric == "rank_utilization":
    every_token = state.field(
        st.toggle, "Rank utilization after every token", "every_token", False,
        help="Track s₁ of the state after every token with a warm-started Rayleigh–Ritz iteration instead of an "
             "SVD per state (never above the true s₁, stops at an estimated error of 3e-5 in the utilization; "
             "$\\|S\\|_F$ is exact). Where each key channel decays at its own rate, or the transition has a "
             "low-rank part, the tracker does not apply: those layers take an SVD of every state (exact, slower).")
if other:
    compare_views.drill_in(ctx, sides, (data, data_other), metric, layer, head, chosen, every_token, stride)
else:
    states_views.drill_in(ctx, (data, rand), prov, metric, layer, head, chosen, every_token, stride)
states_views.rank_cards(sides, (data, data_other) if other else (data,), (prov, prov_other), layer, head)
heads_view.states_section(ctx, layer)
