"""Sweep & latency: perplexity vs pruning ratio per strategy, and kernel latency vs key dim, drawn live."""
import streamlit as st

from ui.explain import explainer
from ui.pending import notice_if_missing

st.title("Sweep & latency")
explainer(
    "A sweep prunes the model at a series of ratios for each strategy and measures perplexity on a stated "
    "dataset, split, context and stride; a latency sweep times the recurrence kernel against the key "
    "dimension (fla's Triton kernels on GPU after warm-up, the torch path on CPU), with device and dtype "
    "on every number. Points appear one by one while the work runs.",
    [r"\mathrm{PPL} = \exp\Big(-\frac{1}{N}\sum_{t} \log p(x_t \mid x_{<t})\Big)",
     r"\text{latency}(d_k') = \operatorname{median}_{\text{runs}}\ t_{\text{kernel}}"])
notice_if_missing("The sweep")
