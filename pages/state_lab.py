"""State lab: step through a text token by token and watch one head's state fill up, under three update rules."""
import html

import streamlit as st

from analysis import state_lab as lab
from analysis.archs import adapter_for
from analysis.strategies import STRATEGIES
from ui import frame, state
from ui import state_lab_data as data
from ui import state_lab_figures as figs
from ui.context import current
from ui.errors import guard
from ui.explain import explainer
from ui.progress import first_time

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("State lab")
ctx = current()
own = adapter_for(ctx.model)  # the explainer shows this family's own rule, as analysis.state_lab runs it
own_rule = lab.model_rule_latex(own.gate, own.kernel_spec.delta)
readout = r"o_t = \mathrm{scale}\cdot S_t^\top q_t" if own.readout_scaled else r"o_t = S_t^\top q_t"
explainer(
    r"Each head of a linear-attention layer keeps a matrix state $S_t \in \mathbb{R}^{d_k \times d_v}$ (keys index "
    "rows). Every token writes its value $v_t$ at its key $k_t$; a query $q$ reads $S^\\top q$. Pick a text, a "
    "layer and a head, then move the **token scrubber**: the heatmap is $S_t$, the spectrum its singular values "
    "with the numerical rank, the curves compare three update rules on the **same** inputs (the model's real "
    "$q, k, v, \\beta, g$ as its recurrence receives them). *Head* is the recurrence's head: the value head (where "
    "several value heads share a key head, they read the same keys).",
    [rf"\text{{model ({own.label}): }} {own_rule},\quad {readout}",
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
    names = list(data.PREPARED)
    picked = c1.selectbox("Prepared sentence", names, key=state.remembered("lab_prepared", names[0], names),
                          on_change=lambda: state.choose("lab_text", data.PREPARED[st.session_state["w:lab_prepared"]]))
    state.remember("lab_prepared")
    layers, heads = range(ctx.info.layers), range(ctx.info.value_heads)
    block_of = {b.linear_layer: b.block for b in ctx.info.blocks if b.linear_layer is not None}
    hybrid = len(ctx.info.blocks) > ctx.info.layers  # softmax blocks hold no state: count the linear ones only
    layer = c2.selectbox("Layer", list(layers), key=state.remembered("lab_layer", 0, layers),
                         format_func=lambda i: f"{i} (block {block_of.get(i, i)})" if hybrid else str(i))
    state.remember("lab_layer")
    head = c3.selectbox("Head", list(heads), key=state.remembered("lab_head", 0, heads))
    state.remember("lab_head")
    text = st.text_area("Text (or edit the prepared one)", key=state.remembered("lab_text", data.PREPARED[picked]),
                        height=80, disabled=ctx.task is not None)
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
if mode == REAL and x.g is None:
    st.caption("This layer has no gate, so the model's own rule *is* the delta rule (their curves coincide).")
rule = st.radio("Update rule shown in the heatmap, spectrum and noise probe", list(lab.RULES), horizontal=True,
                format_func=lab.RULES.get, key=state.remembered("lab_rule", "model", list(lab.RULES)))
state.remember("lab_rule")
T = x.tokens
tr = traces[rule]
COLORS = [figs.RULE_COLORS[r] for r in lab.RULES]  # one colour per rule on every chart
DASHED = [lab.RULES["delta"]]  # dashed, so the model's own rule stays visible where the two coincide (no gate)

play = st.toggle("▶ Play (one token per second)", key="lab_play")


def scrubber() -> None:
    """The per-token views: cheap, everything is precomputed; a fragment so Play reruns only this part."""
    steps = range(T)
    wkey = state.remembered("lab_t", T - 1, steps)
    if play:
        state.choose("lab_t", (int(st.session_state[wkey]) + 1) % T)
    t = st.slider("Token t (the state after token t)", 0, max(T - 1, 1), key=wkey, disabled=T == 1)
    t = min(int(state.remember("lab_t")), T - 1)
    # tokens carry their own spaces: join them as they are, a faint underline marks where each one ends
    strip = "".join(f"<mark>{html.escape(tok)}</mark>" if i == t else
                    f"<span style='border-bottom:1px solid #ccc'>{html.escape(tok)}</span>" for i, tok in enumerate(tokens))
    st.markdown(f"<div style='font-family:monospace;line-height:1.9;white-space:pre-wrap'>{strip}</div>",
                unsafe_allow_html=True)
    rank = int(tr.numerical_rank[t])
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figs.state_heatmap(tr.states[t].tolist(), f"State S_t after token {t} ({lab.RULES[rule]})"),
                        key="lab_state")
        st.caption(f"{where} · {lab.RULES[rule]}. Notice: each token adds one rank-one term k uᵀ; the delta rule "
                   "first erases what the key held.")
    with right:
        st.plotly_chart(figs.spectrum(tr.singular_values[t].tolist(), rank, lab.TAU,
                                      f"Singular values of S_t, t = {t}: numerical rank {rank}"), key="lab_spectrum")
        st.caption(f"{where} · {lab.RULES[rule]}. Notice: values below τ·s₁ do not count as rank.")
    left, right = st.columns(2)
    with left:
        util = {name: traces[r].rank_utilization.tolist() for r, name in lab.RULES.items()}
        st.plotly_chart(figs.over_tokens(util, t, tokens, "Rank utilization u(S_t) by rule", "stable rank / min(dk, dv)",
                                         colors=COLORS, dashed=DASHED),
                        key="lab_utilization")
        st.caption(f"{where}. Notice: plain linear attention piles every write onto the same few directions.")
    with right:
        errors = {name: traces[r].retrieval_error[t, :t + 1].tolist() for r, name in lab.RULES.items()}
        st.plotly_chart(figs.over_tokens(errors, t, tokens[:t + 1], f"What S_t remembers: retrieval error of each "
                                         f"earlier token j ≤ {t}", "‖S_tᵀk_j − w_j‖ / ‖w_j‖", colors=COLORS, dashed=DASHED),
                        key="lab_retrieval")
        st.caption(f"{where}. Notice: 0 = read back exactly; old tokens fade under a decay, get overwritten "
                   "under the delta rule, interfere under linear attention.")
    noise_probe(t)
    if mode == REAL:
        pruned_view(t)


def noise_probe(t: int) -> None:
    st.subheader("Query noise at token t")
    c1, c2 = st.columns(2)
    j = c1.slider("Read the key of token j", 0, max(t, 1), key=state.remembered("lab_j", t, range(t + 1)),
                  disabled=t == 0)
    j = min(int(state.remember("lab_j")), t)
    snr = c2.slider("SNR (dB)", -10, 40, key=state.remembered("lab_snr", 10))
    state.remember("lab_snr")
    with guard():
        p = lab.noise_probe(tr.states[t], x.k[j], float(snr), written=tr.written[j])
    at = p["at"]
    first = lab.validity_label(at["first_valid"], p["first_valid_from_db"])
    second = lab.validity_label(at["second_valid"], p["second_valid_from_db"])
    m1, m2, m3, m4, m5 = st.columns(5)
    m1.metric("Monte Carlo error, q = k + ε", f"{at['mc_raw']:.3g}")
    m2.metric(r"exact RMS $\sigma\|S\|_F/\|S^\top k\|$", f"{at['bound_raw']:.3g}")
    m3.metric("Monte Carlo, re-normalised q̂", f"{at['mc_renorm']:.3g}")
    m4.metric("second-order prediction, q̂", f"{at['second_order']:.3g}", help=second)
    if "retrieval_raw" in at:
        m5.metric(f"error vs $w_{{{j}}}$ with this noise", f"{at['retrieval_raw']:.3g}",
                  help=f"exact RMS of $\\|S^\\top q - w_j\\|/\\|w_j\\|$: $\\sqrt{{e^2 + \\sigma^2\\|S\\|_F^2/\\|w_j\\|^2}}$, e = {tr.retrieval_error[t, j]:.3g} "
                       "without noise")
    st.plotly_chart(figs.noise_curves(p, float(snr), f"Reading token {j} from S_{t}: relative error vs SNR",
                                      first, second), key="lab_noise")
    st.caption(f"{where} · {lab.RULES[rule]} · 256 draws, seed 0 · first order {first}, second order {second}. "
               "Notice: a state of low rank or large κ amplifies the same query noise more.")


def pruned_view(t: int) -> None:
    """The same head with fewer key channels, beside the original (real inputs only)."""
    st.subheader("What if dk were smaller?")
    c1, c2 = st.columns(2)
    rotations = adapter_for(ctx.model).rotations  # PCA mixes channels: not offered where each has its own decay
    names = [name for name, strat in STRATEGIES.items() if strat.axis_aligned or rotations]
    strategy = c1.selectbox("Strategy", names, format_func=lambda s: STRATEGIES[s].label,
                            key=state.remembered("lab_strategy", "l1", names))
    state.remember("lab_strategy")
    ratio = c2.slider("Pruning ratio ρ (dk′ = dk(1 − ρ))", 0.0, 0.9, key=state.remembered("lab_ratio", 0.5), step=0.05)
    state.remember("lab_ratio")
    pargs = (ctx.key, text, int(layer), int(head), strategy, float(ratio))
    with guard(), first_time(data.pruned_traces.is_cached(*pargs), "Pruning this head's keys…",
                             "Pruned head computed") as report:
        pruned = data.pruned_traces(*pargs, progress=report)
    pt = pruned["traces"][rule]
    dk_p = pruned["inputs"].dims[0]
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figs.state_heatmap(pt.states[t].tolist(), f"Pruned state S_t after token {t}: dk′ = {dk_p}"),
                        key="lab_pruned_state")
    with right:
        rank_p = int(pt.numerical_rank[t])
        st.plotly_chart(figs.spectrum(pt.singular_values[t].tolist(), rank_p, lab.TAU,
                                      f"Singular values, dk′ = {dk_p}: numerical rank {rank_p}",
                                      tr.singular_values[t].tolist(), f"original dk = {x.dims[0]}"),
                        key="lab_pruned_spectrum")
    left, right = st.columns(2)
    with left:
        curves = {f"{rule} dk = {x.dims[0]}": tr.numerical_rank.tolist(),
                  f"{rule} dk′ = {dk_p}": pt.numerical_rank.tolist()}
        st.plotly_chart(figs.over_tokens(curves, t, tokens, f"Numerical rank, original vs pruned ({strategy})",
                                         "numerical rank (directions)", dashed=[f"{rule} dk′ = {dk_p}"],
                                         colors=[figs.RULE_COLORS[rule]] * 2),
                        key="lab_pruned_utilization")
    with right:
        errs = {f"{rule} dk = {x.dims[0]}": tr.retrieval_error[t, :t + 1].tolist(),
                f"{rule} dk′ = {dk_p}": pt.retrieval_error[t, :t + 1].tolist()}
        st.plotly_chart(figs.over_tokens(errs, t, tokens[:t + 1], f"Retrieval error at t = {t}, original vs pruned",
                                         "‖S_tᵀk_j − w_j‖ / ‖w_j‖", dashed=[f"{rule} dk′ = {dk_p}"],
                                         colors=[figs.RULE_COLORS[rule]] * 2),
                        key="lab_pruned_retrieval")
    st.caption(f"{where} · {lab.RULES[rule]} · {STRATEGIES[strategy].label}, ρ = {ratio:g}: channels zeroed after "
               "the convolution, keys re-normalised, readout scale unchanged. Notice: fewer key rows, fewer "
               "directions to store associations in.")


st.fragment(scrubber, run_every=1.0 if play else None)()

