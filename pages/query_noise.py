"""Query noise: how a head's final state amplifies noise in the query — analytic figures at once, Monte Carlo
and the recall curve on request (buttons, with progress)."""
import time

import streamlit as st

from analysis.noise import VALIDITY_TOL
from ui import cache, figures, frame, noise_tables, noise_view, notice, state
from ui.clicks import click, clicked_for
from ui.context import current, traced
from ui.errors import guard
from ui.labels import caption

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Query noise")
noise_view.explain()

ctx = current()
stride = int(state.get("stride", 8))  # share the States & rank trace (same cache entry)
data = traced(ctx, stride)
prov = ctx.provenance(data)
n_layers, n_heads = len(data["final_states"]), data["final_states"][0].shape[1]

c1, c2, c3, c4, c5, c6 = st.columns([1, 1, 1, 1, 1, 2])
layer = state.field(c1.selectbox, "Layer", "sel_layer", 0, options=range(n_layers))
head = state.field(c2.selectbox, "Head", "sel_head", 0, options=range(n_heads))
lo = state.field(c3.number_input, "SNR from (dB)", "snr_lo", -10, -60, 100, step=5)
hi = state.field(c4.number_input, "SNR to (dB)", "snr_hi", 40, -60, 100, step=5)
samples = state.field(c5.selectbox, "MC samples", "mc_samples", 256, options=[64, 256, 1024])
with guard():
    bounds = cache.noise_bounds(ctx.key, ctx.spec, stride, layer, head)
offered = bounds["offered"]
if offered:
    picked = state.field(c6.multiselect, "Singular directions j (within the numerical rank)", "noise_dirs", [1, 2],
                         options=offered)
else:
    picked = []
    c6.markdown("**Singular directions j**: none (the state is zero).")
if bounds["skipped"]:
    st.caption(f"Only directions within every sequence's numerical rank are offered: {bounds['skipped']}.")
if hi < lo:
    st.error(f"The SNR range is empty ({lo} dB to {hi} dB); make “SNR to” at least “SNR from”.")
    st.stop()
snr = tuple(float(s) for s in range(int(lo), int(hi) + 1, 5))
probes = tuple(j - 1 for j in picked if j in offered) + (None,)
names = {p: cache.probe_name(p, bounds["n_keys"]) for p in probes}

# ---- closed-form figures: instant --------------------------------------------------------------------------
st.subheader(f"Layer {layer}, head {head}: closed-form figures of the final state")
st.dataframe(noise_tables.closed_form_table(bounds["table"], picked))
st.caption(caption(prov, f"state after token {data['tokens'] - 1}; numerical rank at τ = 1e-3; $\\|S\\|_F^2$ is the "
                         "noise energy per unit σ², s₁ the worst-case gain, κ = s₁/sᵣ; quartiles over the sequences "
                         "(a direction's over those whose rank reaches it)"))

# ---- Monte Carlo: on request, step by step ------------------------------------------------------------------
with guard():
    pred = cache.noise_predictions(ctx.key, ctx.spec, stride, layer, head, snr, probes)
settings = (ctx.key, ctx.spec, stride, layer, head, snr, probes, int(samples))
done = st.session_state.setdefault("noise_mc_done", {})  # settings whose Monte Carlo finished → its seconds
clicked = clicked_for("noise_mc", settings)
steps = [(p, renorm) for p in probes for renorm in (False, True)]
left, right = st.columns([1, 3])
left.button("Run Monte Carlo" if settings not in done else "Run again (cached)", key="noise_mc_run", type="primary",
            on_click=click, args=("noise_mc", settings))
right.caption(f"{len(steps)} steps: each probe with the raw and the re-normalised query, {samples} noise samples "
              f"per key and SNR, {len(snr)} SNRs, {bounds['sequences']} sequences."
              + ("" if settings in done else " Until it runs, the plot shows the predictions only."))
mc = {}
if clicked or settings in done:
    bar = st.progress(0.0, text="Monte Carlo: starting…")
    t0 = time.perf_counter()
    with guard():
        for i, (p, renorm) in enumerate(steps):
            label = f"{names[p]}, {'re-normalised' if renorm else 'raw'} query"
            bar.progress(i / len(steps), text=f"Monte Carlo step {i + 1} of {len(steps)}: {label}…")
            mc[p, renorm] = cache.noise_mc_step(ctx.key, ctx.spec, stride, layer, head, snr, p, int(samples), renorm)
    seconds = done.get(settings, time.perf_counter() - t0)
    bar.progress(1.0, text=f"Monte Carlo: {len(steps)} of {len(steps)} steps done in {seconds:.1f} s "
                           "(cached for these settings)")
    if settings not in done:
        done[settings] = seconds
        st.rerun()  # redraw the button as "Run again (cached)"; every step comes back from the cache

summaries = [cache.noise_summary(names[p], snr, pred[p], mc.get((p, False)), mc.get((p, True))) for p in probes]
fig = figures.retrieval_error_vs_snr(snr, summaries, f"Relative retrieval error vs query SNR: layer {layer}, head {head}")
st.plotly_chart(fig, key="noise_vs_snr")
mc_note = (f"Monte Carlo (markers): per sequence the RMS over the keys and {samples} noise samples, seed 0"
           if mc else "Monte Carlo not run yet")
st.caption(caption(prov, f"{mc_note}; medians over {bounds['sequences']} sequences, bars the interquartile range; "
                         f"re-normalised predictions drawn only where valid (first neglected term ≤ {VALIDITY_TOL:.0%})"))
st.caption(notice.noise_plot(snr, summaries))
st.markdown("**Predictions and their validity** (median over sequences; “vs MC”: median over sequences of "
            "prediction / Monte Carlo − 1, both RMS)")
st.dataframe(noise_tables.prediction_table(summaries, snr), hide_index=True)

# ---- recall accuracy under noise: on request, one SNR per step ---------------------------------------------
if ctx.task is not None:
    noise_view.recall_section(ctx, snr)
