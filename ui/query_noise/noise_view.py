"""The Query noise page's explanations: its explainer and which of its figures describe the loaded model (its long
works, the Monte Carlo and the recall curve, are jobs: ui.query_noise.noise_jobs)."""
from __future__ import annotations

import streamlit as st

from analysis.archs import adapter_for
from analysis.archs.recurrence_words import words
from analysis.linalg.noise import VALIDITY_TOL
from analysis.inspect.noise_report import bounds
from ui.shared.context import Context
from ui.shared.explain import explainer


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
