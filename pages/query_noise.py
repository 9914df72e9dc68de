"""Query noise: how a head's final state amplifies noise in the query — analytic figures at once, Monte Carlo
and the recall curve on request (buttons, with progress)."""
import time

import streamlit as st

from analysis.noise import VALIDITY_TOL
from ui import cache, figures, frame, noise_tables, state
from ui.clicks import click, clicked_for
from ui.batches import recall_label
from ui.context import current, traced
from ui.errors import guard
from ui.explain import explainer
from ui.labels import Provenance, caption



frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Query noise")
st.markdown("The predictions on this page are standard results for a linear readout with a Gaussian-noisy query, "
            "derived from the singular values of the state (formulas under “What am I seeing?”). The re-normalised "
            "query's prediction is a series in σ²: each order is drawn only where its first neglected term keeps it "
            f"within {VALIDITY_TOL:.0%}, and a Monte-Carlo estimate checks all of them.")
explainer(
    "A head reads its state with $o = \\text{scale}\\cdot S^\\top q$, $S\\in\\mathbb R^{d_k\\times d_v}$ with singular "
    "values $s_1\\ge\\dots\\ge s_m$. If the query is a stored key plus noise, $q = k + \\varepsilon$, the readout "
    "error $S^\\top\\varepsilon$ depends on those singular values: a state with a few dominant directions (large "
    "condition number $\\kappa$) reads weak directions back with a large relative error. The **table** gives the "
    "closed-form figures of this head's final state, one row per sequence, with quartiles over sequences; "
    "directions beyond a sequence's numerical rank $r$ are marked “beyond rank” (there $s_j$ is rounding noise). The "
    "**plot** shows the relative RMS retrieval error against the SNR for keys along the top singular directions "
    "and for the last real keys of each sequence: lines are predictions, markers the Monte Carlo (after **Run "
    "Monte Carlo**), each the median over sequences of a per-sequence RMS, bars the interquartile range. fla's "
    "kernel re-normalises the query to unit length; for that query the prediction below is a series in "
    "$\\sigma^2$ (with $p = \\|S\\|_F^2 - \\|S^\\top k\\|^2$, $g = \\|S^\\top k\\|^2$, $d = d_k$), exact in its "
    "first two orders; the first order alone misses the $g$ term, which dominates for a numerically rank-1 state.",
    [r"q = k + \varepsilon,\quad \varepsilon\sim\mathcal N(0,\sigma^2 I_{d_k}),\quad "
     r"\mathrm{SNR} = \|k\|^2/(d_k\,\sigma^2)",
     r"\mathbb E\,\|S^\top\varepsilon\|^2 = \sigma^2\,\|S\|_F^2,\qquad "
     r"\sup_{\varepsilon}\,\|S^\top\varepsilon\|/\|\varepsilon\| = s_1",
     r"\frac{\|S^\top\varepsilon\|}{\|S^\top k\|} \le \kappa\,\frac{\|\varepsilon\|}{\|k\|},\quad "
     r"\kappa = s_1/s_r\ \ (k \in \operatorname{span} U_{:,1..r}),\quad r = \#\{s_i > \tau s_1\}",
     r"k = u_j,\ j \le r:\quad \mathbb E\,\|S^\top\varepsilon\|^2/\|S^\top k\|^2 = \sigma^2 \textstyle\sum_i s_i^2 / s_j^2",
     r"\hat q = \frac{k+\varepsilon}{\|k+\varepsilon\|},\ \|k\|=1:\quad "
     r"\mathbb E\,\|S^\top(\hat q - k)\|^2 = \sigma^2 p \;-\; \sigma^4\big[(d-2)\,p - \tfrac14 (d^2-1)\,g\big] "
     r"\;+\; O(\sigma^6)",
     r"\text{valid where } \sigma^6\big[(d-2)(d-4)\,p + \tfrac18 (d^2-1)(3d-11)\,g\big] "
     r"\text{ moves the predicted RMS by} \le " + f"{VALIDITY_TOL * 100:.0f}" + r"\,\%"],
    "The series comes from writing $\\hat q = \\cos\\theta\\,k + \\sin\\theta\\,e$ with $e$ uniform on the sphere "
    "orthogonal to $k$: exactly $\\mathbb E\\|S^\\top(\\hat q-k)\\|^2 = g\\,\\mathbb E(1-\\cos\\theta)^2 + "
    "p\\,\\mathbb E\\sin^2\\theta/(d-1)$, and both expectations are expanded in $\\sigma^2$ "
    "(`analysis/noise.py`). Raw queries need no approximation.")



ctx = current()
stride = int(state.get("stride", 8))  # share the States & rank trace (same cache entry)
data = traced(ctx, stride)
prov = ctx.provenance(data)
n_layers, n_heads = len(data["final_states"]), data["final_states"][0].shape[1]

c1, c2, c3, c4, c5, c6 = st.columns([1, 1, 1, 1, 1, 2])
layer = c1.selectbox("Layer", list(range(n_layers)), key=state.remembered("sel_layer", 0, range(n_layers)))
state.remember("sel_layer")
head = c2.selectbox("Head", list(range(n_heads)), key=state.remembered("sel_head", 0, range(n_heads)))
state.remember("sel_head")
lo = c3.number_input("SNR from (dB)", -60, 100, key=state.remembered("snr_lo", -10), step=5)
state.remember("snr_lo")
hi = c4.number_input("SNR to (dB)", -60, 100, key=state.remembered("snr_hi", 40), step=5)
state.remember("snr_hi")
samples = c5.selectbox("MC samples", [64, 256, 1024], key=state.remembered("mc_samples", 256, [64, 256, 1024]))
state.remember("mc_samples")
with guard():
    bounds = cache.noise_bounds(ctx.key, ctx.spec, stride, layer, head)
offered = bounds["offered"]
if offered:
    picked = c6.multiselect("Singular directions j (within the numerical rank)", offered,
                            key=state.remembered("noise_dirs", [1, 2], offered))
    state.remember("noise_dirs")
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
st.dataframe(noise_tables.closed_form_table(bounds["table"]))
st.caption(caption(prov, f"state after token {data['tokens'] - 1}; numerical rank at τ = 1e-3; ‖S‖_F² is the "
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
              f"per key and SNR, {len(snr)} SNRs, {bounds['sequences']} sequences. Until it runs, the plot shows the "
              "predictions only.")
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
st.markdown("**Predictions and their validity** (median over sequences; “vs MC”: median over sequences of "
            "prediction / Monte Carlo − 1, both RMS)")
st.dataframe(noise_tables.prediction_table(summaries, snr), hide_index=True)

# ---- recall accuracy under noise: on request, one SNR per step ---------------------------------------------
if ctx.task is not None:
    st.subheader("Recall accuracy under query noise")
    st.markdown("Gaussian noise at the given SNR is added to every layer's query (the output of its short convolution, "
                "before the kernel's l2 norm) at the positions where the model must name a queried value; "
                "the same sequences and noise draws are used at every SNR (`analysis.recall_noise`).")
    n_eval = int(st.number_input("Evaluation sequences", 16, 2048, key=state.remembered("recall_eval", 256), step=16))
    state.remember("recall_eval")
    recall_settings = (ctx.key, ctx.task, snr, n_eval)
    recall_done = st.session_state.setdefault("recall_noise_done", set())
    recall_clicked = clicked_for("recall_noise", recall_settings)
    points = [None, *snr]
    st.button("Run recall vs SNR" if recall_settings not in recall_done else "Run again (cached)",
              key="recall_noise_run", type="primary", on_click=click, args=("recall_noise", recall_settings))
    if recall_clicked or recall_settings in recall_done:
        bar = st.progress(0.0, text="Recall: starting…")
        results = {}
        with guard():
            for i, x in enumerate(points):
                bar.progress(i / len(points), text=f"Recall step {i + 1} of {len(points)}: "
                                                    + ("clean queries" if x is None else f"SNR {x:g} dB") + "…")
                results[x] = cache.recall_noise_point(ctx.key, ctx.task, x, n_eval)
        bar.progress(1.0, text=f"Recall: {len(points)} of {len(points)} points done (cached for these settings)")
        if recall_settings not in recall_done:
            recall_done.add(recall_settings)
            st.rerun()
        clean = results[None]["accuracy"]
        st.plotly_chart(figures.recall_accuracy_vs_snr(list(snr), [results[x]["accuracy"] for x in snr], clean,
                                                       "Recall accuracy vs query SNR", chance=1 / ctx.task.n_values),
                        key="recall_vs_snr")
        rprov = Provenance(ctx.name, recall_label(ctx.task, 1234), ctx.task.seq_len, n_eval, ctx.key.device,
                           ctx.key.dtype)
        st.caption(caption(rprov, f"{results[None]['queries']} scored queries; noise seed 0; all layers"))
    else:
        st.caption(f"{len(points)} steps (clean queries, then each SNR), {n_eval} sequences each; it runs only "
                   "when asked.")
