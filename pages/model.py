"""Model: architecture summary, state size, and what fla's kernels will do with this model."""
import pandas as pd
import streamlit as st

from analysis.archs import adapter_for
from analysis.archs.implementation import implementation
from analysis.archs.recurrence_words import words
from analysis.archs.kernels import kernel_spec
from analysis.models.load import TILE_ROWS
from ui.shared import figures, frame, notice
from ui.shared.blocks import blocks_frame
from ui.shared.context import current
from ui.shared.explain import explainer
from ui.shared.navigation import PAGES, PURPOSE
from ui.model import report_export

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame
KERNELS = "What the kernels will do: key tiles, what runs each layer, GPU limits"

st.title("Model")
st.markdown(PURPOSE)
ctx = current()
recurrence = words(adapter_for(ctx.model))  # this family's own rule, readout and inputs: never assume the delta rule
explainer(
    f"Each {recurrence.label} layer keeps, per head, a recurrent state matrix "
    "$S \\in \\mathbb{R}^{d_k \\times d_v}$ (K-first) that every token updates and the query reads. "
    f"{recurrence.inputs[0].upper()}{recurrence.inputs[1:]}. "
    f"The chunked kernels hold $S$ in tiles of {TILE_ROWS} key rows, so the key dimension $d_k$ sets both the state "
    "size and the kernel's work: pruning $d_k$ only speeds things up when it removes whole tiles.",
    [rf"{recurrence.update},\quad {recurrence.readout}", r"\text{fp32 state bytes} = 4\sum_\ell H^v_\ell\, d_{k,\ell}\, d_v,"
     r"\qquad \text{tiles per head} = \lceil d_k / 64 \rceil"])

with st.expander("Start here: the pages in the sidebar's order", expanded=True):
    for number, page in enumerate(PAGES, 1):
        st.page_link(page.path, label=f"{number}. {page.title}: {page.sentence}")

info = ctx.info
dk_text = ", ".join(str(d) for d in info.head_k_dims)
per_layer = len(set(info.value_heads_per_layer)) > 1   # a head prune: heads differ by layer
rows = [
    ("Architecture", info.label), ("Layers", info.layers),
    ("Heads (q/k)", ", ".join(map(str, info.key_heads_per_layer)) + " by layer" if per_layer else info.heads),
    ("Value heads", ", ".join(map(str, info.value_heads_per_layer)) + " by layer" if per_layer else info.value_heads),
    ("dk per head, by layer", dk_text), ("dv per head", info.head_v_dim),
    ("Hidden size", info.hidden_size), ("Vocabulary", info.vocab_size), ("Parameters", f"{info.parameters:,}"),
    ("fp32 state bytes per sequence",
     f"{info.state_bytes_per_sequence:,} ({info.state_bytes_per_sequence / 2**20:.2f} MiB)"),
    ("Conv state bytes per sequence", f"{info.conv_state_bytes_per_sequence:,}"),
    ("Device", info.device), ("dtype", info.dtype),
]
if any(b.kind != "linear" for b in info.blocks):  # a hybrid: "Layers" counts the linear-attention ones
    rows.insert(2, ("Blocks (linear + softmax attention)", len(info.blocks)))
if getattr(ctx.model, "analysis_streaming", None):  # over the sidebar's Max memory: read one block at a time
    st.info(f"{ctx.model.analysis_streaming}. Recovery and training need the whole model in memory.")
left, right = st.columns([2, 3])
with left:
    st.subheader(ctx.name)
    st.table(pd.DataFrame([(k, str(v)) for k, v in rows], columns=["Quantity", "Value"]).set_index("Quantity"))
    if ctx.task is not None:
        st.info("Recall model: no tokenizer; the text pages read synthetic recall sequences instead.")
    if any(b.kind != "linear" for b in info.blocks):
        st.markdown(f"**All {len(info.blocks)} blocks, in order** (a hybrid: only the linear-attention layers keep a "
                    "state and are analysed and pruned; softmax attention keeps a KV cache that grows with the context)")
        st.table(blocks_frame(info))
with right:
    st.plotly_chart(figures.key_dim_bars(info.head_k_dims, TILE_ROWS), key="dk_bars")
    st.caption(f"{ctx.name} · architecture read from the loaded modules · device {info.device} · dtype {info.dtype}")
    st.caption(notice.key_dims(info.head_k_dims, TILE_ROWS))
    with st.expander(KERNELS):
        tiles = ", ".join(f"layer {i}: {t}" for i, t in enumerate(info.key_tiles_per_head))
        total = sum(t * h for t, h in zip(info.key_tiles_per_head, info.value_heads_per_layer))
        st.markdown(f"- Key tiles of {TILE_ROWS} rows per head ({tiles}); each sequence's state is {total} tiles "
                    "across all heads and layers.")
        for line in implementation(ctx.model).lines():  # read from the adapter's routed entry points
            st.markdown(f"- {line}")
        spec = kernel_spec(info.kernel)
        if "float32" not in spec.gpu_dtypes:
            st.markdown(f"- fla's {spec.label} GPU kernel needs {' or '.join(spec.gpu_dtypes)}: it refuses float32 "
                        "(loading in float32 on a GPU is refused in one sentence; the CPU path is exact in float32).")
        if spec.min_key_dim > 1:
            st.markdown(f"- fla's {spec.label} GPU kernel runs key dims of at least {spec.min_key_dim} "
                        f"({spec.min_reason}); a smaller pruned key dim is refused on a GPU, never a kernel crash.")

report_export.section(ctx)
