"""Query noise: how a head's final state amplifies noise in the query — analytic figures next to Monte Carlo."""
import pandas as pd
import streamlit as st

from ui import cache, figures, frame, state
from ui.batches import recall_label
from ui.context import current, traced
from ui.errors import guard
from ui.explain import explainer
from ui.labels import Provenance, caption

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Query noise")
st.info("The paper's theorem text is not available here: the predictions on this page are standard "
        "linear-algebra results (listed under “What am I seeing?”), checked against a Monte-Carlo estimate.")
explainer(
    "A head reads its state with o = scale · Sᵀq. If the query is a stored key plus noise, q = k + ε, the readout "
    "error Sᵀε depends on the state's singular values: a state with a few dominant directions (high condition "
    "number κ) reads weak directions back with large relative error. The **table** gives the closed-form figures "
    "of this head's final state, one row per sequence; the **plot** shows the relative retrieval error against "
    "the SNR for keys along the top singular directions and for the last real keys of each sequence, each as a "
    "Monte-Carlo estimate (markers) next to its analytic prediction (lines), with the raw noisy query and with "
    "the query re-normalised to unit length as fla's kernel does (first-order prediction).",
    [r"q = k + \varepsilon,\quad \varepsilon\sim\mathcal N(0,\sigma^2 I_{d_k}),\quad "
     r"\mathrm{SNR} = \|k\|^2/(d_k\,\sigma^2)",
     r"\mathbb E\,\|S^\top\varepsilon\|^2 = \sigma^2\,\|S\|_F^2,\qquad "
     r"\sup_{\varepsilon}\,\|S^\top\varepsilon\|/\|\varepsilon\| = s_1",
     r"\frac{\|S^\top\varepsilon\|}{\|S^\top k\|} \le \kappa\,\frac{\|\varepsilon\|}{\|k\|},\quad "
     r"\kappa = s_1/s_r\ \ (k \in \operatorname{span} U_{:,1..r})",
     r"k = u_j:\quad \mathbb E\,\|S^\top\varepsilon\|^2/\|S^\top k\|^2 = \sigma^2 \textstyle\sum_i s_i^2 / s_j^2",
     r"\hat q = \frac{k+\varepsilon}{\|k+\varepsilon\|},\ \|k\|=1:\quad "
     r"\mathbb E\,\|S^\top(\hat q - k)\|^2 \approx \sigma^2\,(\|S\|_F^2 - \|S^\top k\|^2)"])

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
m = min(data["final_states"][layer].shape[-2:])
directions = list(range(1, min(m, 8) + 1))
picked = c6.multiselect("Singular directions j", directions, key=state.remembered("noise_dirs", [1, 2], directions))
state.remember("noise_dirs")
if hi < lo:
    st.error(f"The SNR range is empty ({lo} dB to {hi} dB); make “SNR to” at least “SNR from”.")
    st.stop()
snr = tuple(float(s) for s in range(int(lo), int(hi) + 1, 5))

with guard(), st.spinner("Monte Carlo over noisy queries…"):
    result = cache.noise_data(ctx.key, ctx.spec, stride, layer, head, snr, tuple(j - 1 for j in picked), int(samples))

st.subheader(f"Layer {layer}, head {head}: analytic figures of the final state")
table = pd.DataFrame(result["table"]).set_index("sequence")
table.index = [f"sequence {i}" for i in table.index]
table.loc["mean over sequences"] = table.mean()
st.dataframe(table.style.format("{:.4g}"))
st.caption(caption(prov, f"state after token {data['tokens'] - 1}; ‖S‖_F² is the noise energy per unit σ², "
                         f"s1 the worst-case gain, κ at the numerical rank (τ = 1e-3)"))

fig = figures.retrieval_error_vs_snr(result["snr_db"], result["probes"],
                                     f"Relative retrieval error vs query SNR: layer {layer}, head {head}")
st.plotly_chart(fig, key="noise_vs_snr")
st.caption(caption(prov, f"RMS over {data['sequences']} sequences (and keys), {samples} noise samples per key "
                         "and SNR, seed 0; markers Monte Carlo, lines analytic (re-normalised: first order)"))

if ctx.task is not None:
    st.subheader("Recall accuracy under query noise")
    st.markdown("Gaussian noise at the given SNR is added to every layer's query (the output of `q_conv1d`, "
                "before the kernel's l2 norm) at the positions where the model must name a queried value; "
                "the same sequences and noise draws are used at every SNR (`analysis.recall_noise`).")
    n_eval = st.number_input("Evaluation sequences", 16, 2048, key=state.remembered("recall_eval", 256), step=16)
    state.remember("recall_eval")
    with guard(), st.spinner("Running the recall task with noisy queries…"):
        recall = cache.recall_noise_data(ctx.key, ctx.task, snr, int(n_eval))
    st.plotly_chart(figures.recall_accuracy_vs_snr(recall["snr_db"], recall["accuracy"], recall["clean_accuracy"],
                                                   "Recall accuracy vs query SNR", chance=1 / ctx.task.n_values),
                    key="recall_vs_snr")
    rprov = Provenance(ctx.name, recall_label(ctx.task, 1234), ctx.task.seq_len, int(n_eval), ctx.key.device,
                       ctx.key.dtype)
    st.caption(caption(rprov, f"{recall['queries']} scored queries; noise seed 0; all layers"))
