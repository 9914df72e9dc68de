"""Query noise: how a head's final state amplifies noise in the query — analytic figures at once, Monte Carlo
and the recall curve on request (jobs: progress, Stop); optionally beside a pruned version (two columns)."""
import streamlit as st

from analysis.linalg.noise import VALIDITY_TOL
from ui.shared import cache, figures, frame, notice, rank_card_view, state
from ui.shared.context import current
from ui.shared.errors import guard
from ui.shared.labels import caption
from ui.shared.scales import TAU
from ui.compare import compare, compare_views
from ui.query_noise import noise_jobs, noise_tables, noise_view

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Query noise")
ctx = current()
noise_view.explain(ctx)

other = compare.picker(ctx)  # a pruned version beside the loaded model, or None
sides = (compare.original(ctx), other) if other else (compare.original(ctx),)
comparison_only = noise_view.bounds_note(ctx)  # Mamba-2: no l2 norm on the query, re-normalised figures compare only
stride = int(state.get("stride", 8))  # share the States & rank trace (same cache entry)
traces = [compare.traced_side(ctx, side, stride) for side in sides]
data = traces[0]
provs = [compare.provenance(ctx, s, d) for s, d in zip(sides, traces)] if other else [ctx.provenance(data)]
n_layers, n_heads = len(data["final_states"]), data["final_states"][0].shape[1]

c1, c2, c3, c4, c5, c6 = st.columns([1, 1, 1, 1, 1, 2])
layer = state.field(c1.selectbox, "Layer", "sel_layer", 0, options=range(n_layers),
                    format_func=compare_views.layer_label(sides if other else ()))
head = state.field(c2.selectbox, "Head", "sel_head", 0, options=range(n_heads))
lo = state.field(c3.number_input, "SNR from (dB)", "snr_lo", -10, -60, 100, step=5)
hi = state.field(c4.number_input, "SNR to (dB)", "snr_hi", 40, -60, 100, step=5)
samples = state.field(c5.selectbox, "MC samples", "mc_samples", 256, options=[64, 256, 1024])
with guard():
    bounds = [cache.noise_bounds(ctx.key, ctx.spec, stride, layer, head, s.id, _model=s.model) for s in sides]
offered = bounds[0]["offered"]
if offered:
    picked = state.field(c6.multiselect, "Singular directions j (within the numerical rank)", "noise_dirs", [1, 2],
                         options=offered)
else:
    picked = []
    c6.markdown("**Singular directions j**: none (the state is zero).")
for side, b in zip(sides, bounds):
    if b["skipped"]:
        st.caption(f"Only directions within every sequence's numerical rank are offered"
                   + (f" ({side.role})" if other else "") + f": {b['skipped']}.")
if hi < lo:
    st.error(f"The SNR range is empty ({lo} dB to {hi} dB); make “SNR to” at least “SNR from”.")
    st.stop()
snr = tuple(float(s) for s in range(int(lo), int(hi) + 1, 5))
probes = [tuple(j - 1 for j in picked if j in b["offered"]) + (None,) for b in bounds]  # per side, within its rank
names = {p: cache.probe_name(p, bounds[0]["n_keys"]) for p in probes[0] + probes[-1]}
cols = st.columns(len(sides)) if other else [st.container()]
where = lambda s: f" ({s.at_layer(layer)})" if other else ""  # noqa: E731

# ---- closed-form figures: instant --------------------------------------------------------------------------
for side, b, prov, col in zip(sides, bounds, provs, cols):
    with col:
        st.subheader(f"Layer {layer}, head {head}: closed-form figures of the final state{where(side)}")
        st.dataframe(noise_tables.closed_form_table(b["table"], picked))
        st.caption(caption(prov, f"state after token {data['tokens'] - 1}; numerical rank at τ = 1e-3; $\\|S\\|_F^2$ "
                                 "is the noise energy per unit σ², s₁ the worst-case gain, κ = s₁/sᵣ; quartiles over "
                                 "the sequences (a direction's over those whose rank reaches it)"))
        rank_card_view.show(f"layer {layer}, head {head}{where(side)}, final state",
                            traces[sides.index(side)]["singular_values"][layer][:, head, -1], TAU,
                            caption(prov, "the numerical rank above is one of these counts"), key=f"noise_card_{side.id}")

# ---- Monte Carlo: on request, a job ------------------------------------------------------------------------
with guard():
    preds = [cache.noise_predictions(ctx.key, ctx.spec, stride, layer, head, snr, p, s.id, _model=s.model)
             for s, p in zip(sides, probes)]
mc = noise_jobs.monte_carlo(ctx, sides, stride, layer, head, snr, probes, int(samples), names, bounds[0]["sequences"])

for i, (side, b, prov, col) in enumerate(zip(sides, bounds, provs, cols)):
    summaries = [cache.noise_summary(names[p], snr, preds[i][p], mc[i].get((p, False)), mc[i].get((p, True)))
                 for p in probes[i]]
    with col:
        fig = figures.retrieval_error_vs_snr(snr, summaries, "Relative retrieval error vs query SNR: layer "
                                                             f"{layer}, head {head}{where(side)}",
                                              comparison_only)
        st.plotly_chart(fig, key="noise_vs_snr" if i == 0 else "noise_vs_snr_other")
        mc_note = (f"Monte Carlo (markers): per sequence the RMS over the keys and {samples} noise samples, seed 0"
                   if mc[i] else "Monte Carlo not run yet")
        st.caption(caption(prov, f"{mc_note}; medians over {b['sequences']} sequences, bars the interquartile range; "
                                 "re-normalised predictions drawn only where valid (first neglected term ≤ "
                                 f"{VALIDITY_TOL:.0%})"))
        st.caption(notice.noise_plot(snr, summaries))
        st.markdown("**Predictions and their validity** (median over sequences; “vs MC”: median over sequences of "
                    "prediction / Monte Carlo − 1, both RMS)")
        st.dataframe(noise_tables.prediction_table(summaries, snr, comparison_only), hide_index=True)
if other:
    compare.delta_section(ctx, sides, traces)

# ---- recall accuracy under noise: on request, a job -------------------------------------------------------
if ctx.task is not None:
    noise_jobs.recall_section(ctx, snr)
