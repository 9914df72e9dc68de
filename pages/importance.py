"""Channel importance: per-channel scores of each pruning strategy, kept masks, agreement between strategies."""
import streamlit as st

from ui.explain import explainer
from ui.pending import notice_if_missing

st.title("Channel importance")
explainer(
    "Pruning keeps dk' = dk (1 − ρ) of each head's query/key channels. Each strategy scores the channels "
    "(or, for PCA, a rotation of them) and keeps the best: random, L1 of the weights, Wanda (|W| times the "
    "input activation norm), gradient (Taylor), PCA, and DRRQR — strong rank-revealing QR on the post-conv "
    "activations entering the recurrence. This page previews the scores and the kept masks before anything "
    "is pruned, and how much the strategies agree.",
    [r"\text{L1: } \textstyle\sum_j |W_{ij}|,\qquad \text{Wanda: } |W_{ij}|\,\|X_j\|_2,\qquad "
     r"\text{Taylor: } |W \odot \nabla_W \mathcal L|",
     r"d_k' = \lfloor d_k\,(1-\rho_\ell) \rfloor,\qquad \text{agreement} = |A\cap B| / d_k'"])
notice_if_missing("Channel importance")
