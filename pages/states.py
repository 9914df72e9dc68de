"""States & rank: a layer × head map of one rank metric, then one head's metric over tokens and its spectrum."""
import streamlit as st

from analysis.rank import METRIC_INFO
from ui import compare as side_by_side
from ui import compare_views, figures, frame, notice, scales, state
from ui.blocks import head_meaning, hybrid_note
from ui.choices import multi_choice, snap_to
from ui.context import current, traced, traced_every_token
from ui.explain import explainer
from ui.labels import caption, metric_title, weights_name
from ui.reduce import mean_std

TAU = scales.TAU  # the numerical-rank threshold of the collected metrics (ui.cache uses the core's default)

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
metrics = list(METRIC_INFO)
metric = c1.selectbox("Metric", metrics, format_func=lambda k: METRIC_INFO[k].label,
                      key=state.remembered("metric", "rank_utilization", metrics))
state.remember("metric")
stride = c2.number_input("Stride (tokens)", 1, 1024, key=state.remembered("stride", 8), step=1,
                         help="Collect the state every `stride` tokens (plus after the last token).")
state.remember("stride")
compare = c4.toggle("Compare with random init", key=state.remembered("compare_random", False),
                    disabled=other is not None, help="One comparison at a time: set “Compare with” to none first."
                    if other is not None else None)
state.remember("compare_random")
compare = compare and other is None

data = traced(ctx, stride)
rand = traced(ctx, stride, random_init=True) if compare else None
sides = (side_by_side.original(ctx), other) if other else ()
data_other = side_by_side.traced_side(ctx, other, stride) if other else None
prov = side_by_side.provenance(ctx, sides[0], data) if other else ctx.provenance(data)
prov_other = side_by_side.provenance(ctx, other, data_other) if other else None
values = data["metrics"][metric]                     # [L, B, H, P]
n_layers, n_seq, n_heads, _ = values.shape
final, _ = mean_std(values[..., -1], axis=1)         # [L, H]: last position, mean over sequences
if (note := hybrid_note(ctx.info)) is not None:
    st.caption(note)
if (meaning := head_meaning(ctx.info, "value")) is not None:
    st.caption(meaning)

# A click on the heatmap (stored under its key by the previous run) selects the cell, once per click.
click = st.session_state.get("rank_heatmap")
points = ((click or {}).get("selection") or {}).get("points") or []
if not points:
    st.session_state["last_click"] = None  # a later click on the same cell is a new click
else:
    cell = (int(round(points[0]["y"])), int(round(points[0]["x"])))
    if cell != state.get("last_click") and 0 <= cell[0] < n_layers and 0 <= cell[1] < n_heads:
        state.choose("sel_layer", cell[0])
        state.choose("sel_head", cell[1])
        st.session_state["last_click"] = cell
layer = min(int(state.get("sel_layer", 0)), n_layers - 1)
head = min(int(state.get("sel_head", 0)), n_heads - 1)

title = f"{METRIC_INFO[metric].label} of the final state, by layer and head{scales.tau_note(metric, TAU)}"
z_title = metric_title(metric)
final_rand = mean_std(rand["metrics"][metric][..., -1], axis=1)[0] if rand else None
final_other = mean_std(data_other["metrics"][metric][..., -1], axis=1)[0] if other else None
max_rank = max(s.shape[-1] for s in data["singular_values"])  # m = min(dk, dv), largest over layers
scale = c3.radio("Colour scale", scales.CHOICES, key=state.remembered("colour_scale", scales.DATA, scales.CHOICES),
                 format_func=lambda c: scales.choice_label(c, metric, max_rank, TAU, compare or other is not None),
                 help="Data range: the colours span the values shown (one range for both maps when comparing). "
                      "Full range: the metric's possible range (0–1 for rank utilization, 0–m for ranks, "
                      "up to 1/τ for κ), so small differences look small.")
state.remember("colour_scale")
second = [m for m in (final_rand, final_other) if m is not None]
zrange = scales.colour_range(scale, metric, [final] + second, max_rank, TAU)
cols = st.columns(2) if second else [st.container()]
with cols[0]:
    suffix = f" ({weights_name(ctx.key.path)})" if rand else f" ({sides[0].title})" if other else ""
    st.plotly_chart(figures.layer_head_heatmap(final, z_title, title + suffix, (layer, head), zrange),
                    key="rank_heatmap", on_select="rerun", selection_mode="points")
    st.caption(caption(prov, f"state after token {data['tokens'] - 1}, mean over {n_seq} sequences"))
    st.caption(notice.rank_map(metric, METRIC_INFO[metric].label, final, max_rank, final_rand))
if rand:
    with cols[1]:
        st.plotly_chart(figures.layer_head_heatmap(final_rand, z_title, title + " (random init, seed 0)",
                                                   (layer, head), zrange), key="rank_heatmap_random")
        st.caption(caption(prov, "random-init weights (seed 0), same config and inputs"))
if other:
    with cols[1]:
        st.plotly_chart(figures.layer_head_heatmap(final_other, z_title, f"{title} ({other.title})", (layer, head),
                                                   zrange), key="rank_heatmap_compare")
        st.caption(caption(prov_other, f"state after token {data_other['tokens'] - 1}, mean over {n_seq} sequences, "
                                       "same token ids as the original"))
    compare_views.difference_map(ctx, sides, data, final, final_other, metric, (layer, head))
    side_by_side.delta_section(ctx, sides, (data, data_other))

st.subheader("Drill in")
c1, c2, c3 = st.columns([1, 1, 3])
layer = c1.selectbox("Layer", list(range(n_layers)), key=state.remembered("sel_layer", 0, range(n_layers)),
                     format_func=compare_views.layer_label(sides))
state.remember("sel_layer")
head = c2.selectbox("Head", list(range(n_heads)), key=state.remembered("sel_head", 0, range(n_heads)))
state.remember("sel_head")
positions = data["positions"]
default_pos = sorted({positions[min(1, len(positions) - 1)], positions[len(positions) // 2], positions[-1]})
previous = state.get("spectrum_positions")
if previous:  # a new stride or text: keep each picked position at the nearest collected one, and say so
    snapped, moved = snap_to(previous, positions)
    if moved:
        state.choose("spectrum_positions", snapped)
        st.caption("Spectrum positions moved to the nearest collected token position (every "
                   f"{stride} tokens, last {positions[-1]}): " + ", ".join(f"{a} → {b}" for a, b in moved) + ".")
with c3:
    chosen = multi_choice("Spectrum at token positions", positions, "spectrum_positions", default_pos,
                          empty_hint="No position picked: choose at least one to draw its singular spectrum.")

every_token = False
if metric == "rank_utilization":
    every_token = st.toggle(
        "Rank utilization after every token", key=state.remembered("every_token", False),
        help="Track s₁ of the state after every token with a warm-started Rayleigh–Ritz iteration instead of an "
             "SVD per state (never above the true s₁, stops at an estimated error of 3e-5 in the utilization; "
             "$\\|S\\|_F$ is exact).")
    state.remember("every_token")
if other:
    compare_views.drill_in(ctx, sides, (data, data_other), metric, layer, head, chosen, every_token, stride)
else:
    left, right = st.columns(2)
    with left:
        if every_token:
            dense = traced_every_token(ctx)["rank_utilization"]               # [L, B, H, T]
            dense_rand = traced_every_token(ctx, random_init=True)["rank_utilization"] if rand else None
            trace_positions, trace_values = list(range(dense.shape[-1])), dense
            overlay = mean_std(dense_rand[layer, :, head, :], axis=0) if rand else None
            how = "after every token (s₁ tracked)"
        else:
            trace_positions, trace_values = positions, values
            overlay = mean_std(rand["metrics"][metric][layer, :, head, :], axis=0) if rand else None
            how = f"every {stride} tokens"
        mean, std = mean_std(trace_values[layer, :, head, :], axis=0)
        # the token at each position (the first sequence's when there are several) for the hover and short-text ticks
        hover_tokens = lambda ps: [data["token_text"][0][p] for p in ps] if data.get("token_text") else None  # noqa: E731
        st.plotly_chart(figures.metric_over_positions(trace_positions, mean, std, z_title,
                                                      f"{METRIC_INFO[metric].label}{scales.tau_note(metric, TAU)}: "
                                                      f"layer {layer}, head {head}", overlay,
                                                      scales.band_bounds(metric if not every_token else
                                                                         "rank_utilization", TAU),
                                                      weights_name(ctx.key.path), hover_tokens(trace_positions)),
                        key="rank_over_positions")
        st.caption(caption(prov, f"{how}, mean ± std over {n_seq} sequences"
                                 + ("; the hover names sequence 0's token" if n_seq > 1 and data.get("token_text") else "")))
        st.caption(notice.over_positions(trace_positions, mean, hover_tokens(trace_positions)))
    with right:
        index = [positions.index(p) for p in chosen]
        spectra = lambda d: {f"after token {positions[i]}": d["singular_values"][layer][:, head, i].mean(0)  # noqa: E731
                             for i in index}
        if not index:  # a sentence (the picker's hint says what to do), not blank axes
            st.info("No spectrum: no token position is picked above.")
        else:
            st.plotly_chart(figures.singular_spectrum(spectra(data), f"Singular spectrum: layer {layer}, head {head}",
                                                      spectra(rand) if rand else None), key="spectrum")
            st.caption(caption(prov, f"singular values averaged over {n_seq} sequences"))
            st.caption(notice.spectrum(spectra(data)))
