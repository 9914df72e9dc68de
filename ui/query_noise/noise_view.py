"""The Query noise page's parts: its explainer and the recall-accuracy-under-noise section (on request,
one SNR per step, cached)."""
from __future__ import annotations

import streamlit as st

from analysis.archs import adapter_for
from analysis.archs.recurrence_words import words
from analysis.linalg.noise import VALIDITY_TOL
from analysis.inspect.noise_report import bounds
from ui.shared import cache, figures, state
from ui.shared.batches import recall_label
from ui.shared.clicks import click, clicked_for
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.explain import explainer
from ui.shared.labels import Provenance, caption


def explain(ctx: Context) -> None:
    """The page's explainer, in this family's words (analysis.archs.recurrence_words): its readout, and whether its
    kernel re-normalises the query."""
    recurrence = words(adapter_for(ctx.model))
    st.markdown("The predictions on this page are standard results for a linear readout with a Gaussian-noisy query, "
                "derived from the singular values of the state (formulas under “What am I seeing?”). The re-normalised "
                "query's prediction is a series in σ²: each order is drawn only where its first neglected term keeps it "
                f"within {VALIDITY_TOL:.0%}, and a Monte-Carlo estimate checks all of them.")
    explainer(
        f"A {recurrence.label} head reads its state with ${recurrence.readout}$, $S\\in\\mathbb R^{{d_k\\times d_v}}$ "
        "with singular values $s_1\\ge\\dots\\ge s_m$ (a scale, where there is one, cancels in a relative error). "
        "If the query is a stored key plus noise, $q = k + \\varepsilon$, the readout "
        "error $S^\\top\\varepsilon$ depends on those singular values: a state with a few dominant directions (large "
        "condition number $\\kappa$) reads weak directions back with a large relative error. The **table** gives the "
        "closed-form figures of this head's final state, one row per sequence, with quartiles over sequences; "
        "directions beyond a sequence's numerical rank $r$ are marked “beyond rank” (there $s_j$ is rounding noise). The "
        "**plot** shows the relative RMS retrieval error against the SNR for keys along the top singular directions "
        "and for the last real keys of each sequence: lines are predictions, markers the Monte Carlo (after **Run "
        "Monte Carlo**), each the median over sequences of a per-sequence RMS, bars the interquartile range. "
        + ("This family's kernel re-normalises the query to unit length (an l2 norm); " if recurrence.normalised else
           "This family's kernel takes the query as it is (no l2 norm), so the raw-query figures describe it and "
           "the re-normalised series below is a comparison only; ")
        + "for a re-normalised query the prediction below is a series in "
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
        "(`analysis/linalg/noise.py`). Raw queries need no approximation.")


def bounds_note(ctx: Context) -> bool:
    """Say which figures describe this model's readout (analysis.inspect.noise_report.bounds); True when the re-normalised
    ones are comparison only (a kernel without an l2 norm on q and k, e.g. Mamba-2's C and B)."""
    labels = bounds(ctx.info.query_l2_normalised)
    if labels["comparison_only"]:
        st.info(f"{labels['note']} Figures that apply: the table below, “raw query: exact” and “raw: Monte Carlo”; "
                "columns and curves marked “(comparison only)” do not describe this model.")
    return bool(labels["comparison_only"])


def recall_section(ctx: Context, snr: tuple) -> None:
    """Recall accuracy of a recall-trained model with noisy queries (every layer), against the SNR."""
    st.subheader("Recall accuracy under query noise")
    st.markdown("Gaussian noise at the given SNR is added to every layer's query (the output of its short convolution, "
                "before the kernel's l2 norm) at the positions where the model must name a queried value; "
                "the same sequences and noise draws are used at every SNR (`analysis.evaluate.recall_noise`).")
    n_eval = int(state.field(st.number_input, "Evaluation sequences", "recall_eval", 256, 16, 2048, step=16))
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
