"""Prune: uniform or per-layer ratios (suggested from the rank profile, tile-aware); run, compare, save."""
import streamlit as st

from ui.explain import explainer
from ui.pending import notice_if_missing

st.title("Prune")
explainer(
    "Structured pruning of query/key channels: per layer ℓ and head, the same kept index set slices the rows "
    "of q_proj and k_proj and the channels of q_conv1d and k_conv1d, so the state shrinks from dk × dv to "
    "dk' × dv. Ratios can be uniform or per layer; rounding dk' to a multiple of 16/32/64 keeps fla's "
    "64-row kernel tiles full. The pruned model is a new object saved with save_pretrained (safetensors).",
    [r"d_k' = d_k\,(1-\rho_\ell),\qquad \text{tiles} = \lceil d_k'/64 \rceil,\qquad "
     r"\text{state bytes} = 4\,H\,d_k'\,d_v"])
notice_if_missing("Pruning")
