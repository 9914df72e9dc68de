"""State lab: step through a text token by token and watch one head's state fill up, under three update rules."""
import streamlit as st

from analysis.inspect import state_lab as lab
from analysis.archs import adapter_for
from analysis.archs.recurrence_words import words
from ui.shared import frame, state
from ui.shared.context import current
from ui.shared.errors import guard
from ui.shared.explain import explainer
from ui.shared.progress import first_time
from ui.heads import heads_view
from ui.state_lab import state_lab_data as data
from ui.state_lab import state_lab_figures as figs
from ui.state_lab import state_lab_views as views

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("State lab")
ctx = current()
own = words(adapter_for(ctx.model))  # this family's own rule and readout, as analysis.inspect.state_lab runs them
explainer(
    r"Each head of a linear-attention layer keeps a matrix state $S_t \in \mathbb{R}^{d_k \times d_v}$ (keys index "
    f"rows). In {own.label}: {own.inputs}. A query $q$ reads $S^\\top q$. Pick a text, a "
    "layer and a head, then move the **token scrubber**: the heatmap is $S_t$, the spectrum its singular values "
    "with the numerical rank, the curves compare three update rules on the **same** inputs (the model's real "
    "inputs as its recurrence receives them). *Head* is the recurrence's head: the value head (where "
    "several value heads share a key head, they read the same keys).",
    [rf"\text{{model ({own.label}): }} {own.update},\quad {own.readout}",
     r"\text{delta rule, no gate: } S_t = (I - \beta_t k_t k_t^\top) S_{t-1} + \beta_t k_t v_t^\top,\qquad "
     r"\text{linear attention: } S_t = S_{t-1} + k_t v_t^\top,\qquad \text{synthetic head's model rule: } "
     r"S_t = (I - \beta k_t k_t^\top)\, \alpha S_{t-1} + \beta k_t v_t^\top",
     r"e_{t,j} = \frac{\lVert S_t^\top k_j - w_j\rVert}{\lVert w_j\rVert},\quad w_j = \beta_j \lVert k_j\rVert^2 v_j"
     r"\ \text{(delta rules)},\ \ \lVert k_j\rVert^2 v_j\ \text{(linear)}",
     r"\mathrm{rank}_\tau(S) = \#\{i: s_i > \tau s_1\},\qquad u(S) = \frac{\sum_i s_i^2}{s_1^2 \min(d_k, d_v)}",
     r"q = k_j + \varepsilon,\ \varepsilon \sim \mathcal{N}(0, \sigma^2 I),\ \mathrm{SNR} = \frac{\lVert k_j\rVert^2}"
     r"{d_k \sigma^2},\qquad \mathbb{E}\lVert S^\top\varepsilon\rVert^2 = \sigma^2 \lVert S\rVert_F^2"],
    "$w_j$ is what a clean write of token $j$ reads back at once (a key the state held nothing at), so $e_{t,j} > 0$ "
    "at $t = j$ is interference from earlier tokens, and its growth after $j$ is decay or overwriting.")

REAL, SYNTH = "model", "synthetic"
mode = st.radio("Inputs", (REAL, SYNTH), horizontal=True, key=state.remembered("lab_mode", REAL, (REAL, SYNTH)),
                format_func={REAL: "The model's real inputs", SYNTH: "Synthetic head (dk = dv = 4–8)"}.get)
state.remember("lab_mode")

if mode == REAL:
    c1, c2, c3 = st.columns([3, 1, 1])
    names = [*data.PREPARED, data.OWN_TEXT]  # the box names the text below: "your own text" once it is edited
    picked = c1.selectbox("Prepared sentence", names, key=state.remembered("lab_prepared", names[0], names),
                          on_change=data.prepared_picked)
    state.remember("lab_prepared")
    layers, heads = range(ctx.info.layers), range(ctx.info.value_heads)
    block_of = {b.linear_layer: b.block for b in ctx.info.blocks if b.linear_layer is not None}
    hybrid = len(ctx.info.blocks) > ctx.info.layers  # softmax blocks hold no state: count the linear ones only
    layer = c2.selectbox("Layer", list(layers), key=state.remembered("lab_layer", 0, layers),
                         format_func=lambda i: f"{i} (block {block_of.get(i, i)})" if hybrid else str(i))
    state.remember("lab_layer")
    head = c3.selectbox("Head", list(heads), key=state.remembered("lab_head", 0, heads))
    state.remember("lab_head")
    text = st.text_area("Text (or edit the prepared one)", key=state.remembered("lab_text", data.prepared_text(picked)),
                        height=80, disabled=ctx.task is not None, on_change=data.text_typed)
    state.remember("lab_text")
    if ctx.task is not None:
        st.info("This recall model has no tokenizer: the lab reads one of its synthetic recall sequences instead.")
    args = (ctx.key, text, int(layer), int(head))
    with guard(), first_time(data.head_traces.is_cached(*args), f"Reading the text with {ctx.name}…",
                             "Text read, states of this head precomputed") as report:
        result = data.head_traces(*args, progress=report)
        obs = data.observation(ctx.key, text)
    tokens = obs.tokens
    short = "“" + (text if len(text) <= 40 else text[:37] + "…") + "”" if ctx.task is None else "a recall sequence"
    kh = lab.key_head_of(obs, int(layer), int(head))
    head_text = f"head {head}" if kh == head else f"value head {head} (key head {kh})"
    where = (f"{ctx.name} · {short} ({len(tokens)} tokens) · layer {layer}, {head_text} · "
             f"device {ctx.key.device} · dtype {ctx.key.dtype} · rules re-run in fp32 on the CPU")
else:
    c1, c2, c3, c4, c5 = st.columns(5)
    pattern = c1.selectbox("Keys", lab.PATTERNS, key=state.remembered("lab_pattern", lab.PATTERNS[0], lab.PATTERNS))
    state.remember("lab_pattern")
    dk = c2.slider("dk = dv", 4, 8, key=state.remembered("lab_dk", 6))
    state.remember("lab_dk")
    n = c3.slider("Tokens", 1, 24, key=state.remembered("lab_n", 8))
    state.remember("lab_n")
    beta = c4.slider("β", 0.1, 1.0, key=state.remembered("lab_beta", 1.0), step=0.1)
    state.remember("lab_beta")
    decay = c5.slider("Decay α (model rule)", 0.5, 1.0, key=state.remembered("lab_decay", 1.0), step=0.05)
    state.remember("lab_decay")
    overlap = 0.9
    if pattern == "nearly parallel":
        overlap = st.slider("Key overlap c (cosine between two keys = c²)", 0.0, 0.99,
                            key=state.remembered("lab_overlap", 0.9), step=0.01)
        state.remember("lab_overlap")
    with guard():
        result = data.synthetic_traces(pattern, int(dk), int(n), float(beta), float(decay), float(overlap))
    x = result["inputs"]
    tokens = [(f"k=e{int(k.argmax())} v=e{int(v.argmax())}" if pattern != "nearly parallel" else f"v=e{int(v.argmax())}")
              + " " for k, v in zip(x.k, x.v)]  # a trailing space: the strip joins tokens as they are
    where = f"{x.label} · no model · device cpu · dtype float32"

x, traces = result["inputs"], result["traces"]
if mode == REAL and lab.model_rule_is_delta(x):
    st.caption("This layer has no gate, so the model's own rule *is* the delta rule (their curves coincide).")
rule = st.radio("Update rule shown in the heatmap, spectrum and noise probe", list(lab.RULES), horizontal=True,
                format_func=lab.RULES.get, key=state.remembered("lab_rule", "model", list(lab.RULES)))
state.remember("lab_rule")
COLORS = [figs.RULE_COLORS[r] for r in lab.RULES]  # one colour per rule on every chart
DASHED = [lab.RULES["delta"]]  # dashed, so the model's own rule stays visible where the two coincide (no gate)

play = st.toggle("▶ Play (one token per second)", key="lab_play")
picked_head = dict(ctx=ctx, text=text, layer=int(layer), head=int(head),
                   partner_of=heads_view.partner_head) if mode == REAL else {}
view = views.LabView(x, traces, rule, tokens, where, COLORS, DASHED, real=mode == REAL, **picked_head)
st.fragment(views.scrubber, run_every=1.0 if play else None)(view, play)  # Play reruns only the per-token views
