"""Model: architecture summary, state size, and what fla's kernels will do with this model."""
import pandas as pd
import streamlit as st

from analysis.archs import adapter_for
from analysis.archs.implementation import implementation
from analysis.inspect.state_lab import model_rule_latex, readout_latex
from analysis.archs.kernels import kernel_spec
from analysis.models.load import TILE_ROWS
from ui import figures, frame, notice, report_export
from ui.blocks import blocks_frame
from ui.context import current
from ui.explain import explainer

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Model")
explainer(
    r"Each DeltaNet / Gated DeltaNet layer keeps, per head, a recurrent state matrix $S \in \mathbb{R}^{d_k \times d_v}$ "
    "(fla's K-first convention) that is updated by the delta rule at every token and read by the query. "
    f"fla's chunk kernel holds $S$ in tiles of {TILE_ROWS} key rows, so the key dimension $d_k$ sets both the "
    r"state size and the kernel's work: pruning $d_k$ only speeds things up when it removes whole tiles.",
    [r"S_t = (I - \beta_t k_t k_t^\top)\, S_{t-1} + \beta_t k_t v_t^\top \quad\text{(DeltaNet)},\qquad "
     r"S_t = (I - \beta_t k_t k_t^\top)\, \alpha_t S_{t-1} + \beta_t k_t v_t^\top \quad\text{(Gated)}",
     r"S_t = (I - \beta_t k_t k_t^\top)\, \mathrm{Diag}(e^{g_t})\, S_{t-1} + \beta_t k_t v_t^\top "
     r"\quad\text{(KDA: one decay per key channel)}",
     r"o_t = \mathrm{scale}\cdot S_t^\top q_t,\qquad \text{fp32 state bytes} = 4\sum_\ell H^v_\ell\, d_{k,\ell}\, d_v",
     r"\text{tiles per head} = \lceil d_k / 64 \rceil"])

START_HERE = [  # (page, one plain sentence), in teaching order
    ("pages/model.py", "Model", "what the model is: its layers, heads and how big each head's state is."),
    ("pages/states.py", "States & rank", "how many independent directions each head's state really uses."),
    ("pages/state_lab.py", "State lab", "type a sentence and watch one head's state fill up, token by token."),
    ("pages/query_noise.py", "Query noise", "why a low-rank state turns a slightly wrong query into a wrong answer."),
    ("pages/importance.py", "Channel importance", "which key channels each pruning strategy would keep."),
    ("pages/prune.py", "Prune", "remove key channels and measure what the model loses."),
    ("pages/sweep.py", "Sweep & latency", "quality and speed against how much is pruned."),
]
with st.expander("Start here: the pages in teaching order", expanded=True):
    for number, (path, title, sentence) in enumerate(START_HERE, 1):
        st.page_link(path, label=f"{number}. {title}: {sentence}")

ctx = current()
info = ctx.info
dk_text = ", ".join(str(d) for d in info.head_k_dims)
rows = [
    ("Architecture", info.label), ("Layers", info.layers), ("Heads (q/k)", info.heads),
    ("Value heads", info.value_heads), ("dk per head, by layer", dk_text), ("dv per head", info.head_v_dim),
    ("Hidden size", info.hidden_size), ("Vocabulary", info.vocab_size), ("Parameters", f"{info.parameters:,}"),
    ("fp32 state bytes per sequence",
     f"{info.state_bytes_per_sequence:,} ({info.state_bytes_per_sequence / 2**20:.2f} MiB)"),
    ("Conv state bytes per sequence", f"{info.conv_state_bytes_per_sequence:,}"),
    ("Device", info.device), ("dtype", info.dtype),
]
if any(b.kind != "linear" for b in info.blocks):  # a hybrid: "Layers" counts the linear-attention ones
    rows.insert(2, ("Blocks (linear + softmax attention)", len(info.blocks)))
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
    st.subheader("What the kernels will do")
    tiles = ", ".join(f"layer {i}: {t}" for i, t in enumerate(info.key_tiles_per_head))
    total = sum(t * info.value_heads for t in info.key_tiles_per_head)
    st.markdown(f"- Key tiles of {TILE_ROWS} rows per head ({tiles}); each sequence's state is {total} tiles "
                "across all heads and layers.")
    for line in implementation(ctx.model).lines():  # read from the adapter's routed entry points
        st.markdown(f"- {line}")
    spec, own = kernel_spec(info.kernel), adapter_for(ctx.model)
    st.markdown(f"- Each linear layer's recurrence, per head ({spec.label}; the rule the State lab steps through):")
    st.latex(rf"{model_rule_latex(own.gate, spec.delta, spec.low_rank)},\quad {readout_latex(own.readout_scaled)}")
    if "float32" not in spec.gpu_dtypes:
        st.markdown(f"- fla's {spec.label} GPU kernel needs {' or '.join(spec.gpu_dtypes)}: it refuses float32 "
                    "(loading in float32 on a GPU is refused in one sentence; the CPU path is exact in float32).")
    if spec.min_key_dim > 1:
        st.markdown(f"- fla's {spec.label} GPU kernel runs key dims of at least {spec.min_key_dim} "
                    f"({spec.min_reason}); a smaller pruned key dim is refused on a GPU, never a kernel crash.")
    st.plotly_chart(figures.key_dim_bars(info.head_k_dims, TILE_ROWS), key="dk_bars")
    st.caption(f"{ctx.name} · architecture read from the loaded modules · device {info.device} · dtype {info.dtype}")
    st.caption(notice.key_dims(info.head_k_dims, TILE_ROWS))

report_export.section(ctx)
