"""The State lab's per-token views (scrubber, query-noise probe, pruned head): drawn from precomputed traces."""
from __future__ import annotations

import html
from dataclasses import dataclass

import streamlit as st

from analysis.inspect import state_lab as lab
from analysis.archs import adapter_for
from analysis.shrink.strategies import STRATEGIES
from ui.shared import state
from ui.shared.errors import guard
from ui.shared.progress import first_time
from ui.state_lab import state_lab_data as data
from ui.state_lab import state_lab_figures as figs


J_FOLLOWS = "lab_j_follows"  # the token t the probe's token j last followed


@dataclass
class LabView:
    """What the page read and computed, for the views: the inputs x, every rule's traces, the rule shown (tr), the
    token strip, the provenance line, the rules' colours and dashes, and (real inputs only) the model, text, layer,
    head and where to find its partner head."""
    x: object
    traces: dict
    rule: str
    tokens: list
    where: str
    colors: list
    dashed: list
    real: bool
    ctx: object = None
    text: str = ""
    layer: int = 0
    head: int = 0
    partner_of: object = None  # (ctx, layer, head) -> (a head of the other group, its group, this head's group)
                               # | None: the heads study's, which the page passes in (ui.heads)

    @property
    def tr(self):
        return self.traces[self.rule]

    @property
    def T(self) -> int:
        return self.x.tokens


def scrubber(v: LabView, play: bool) -> None:
    """The per-token views: cheap, everything is precomputed; a fragment so Play reruns only this part."""
    steps = range(v.T)
    wkey = state.remembered("lab_t", v.T - 1, steps)
    if play:
        state.choose("lab_t", (int(st.session_state[wkey]) + 1) % v.T)
    t = st.slider("Token t (the state after token t)", 0, max(v.T - 1, 1), key=wkey, disabled=v.T == 1)
    t = min(int(state.remember("lab_t")), v.T - 1)
    # tokens carry their own spaces: join them as they are, a faint underline marks where each one ends
    strip = "".join(f"<mark>{html.escape(tok)}</mark>" if i == t else
                    f"<span style='border-bottom:1px solid #ccc'>{html.escape(tok)}</span>" for i, tok in enumerate(v.tokens))
    st.markdown(f"<div style='font-family:monospace;line-height:1.9;white-space:pre-wrap'>{strip}</div>",
                unsafe_allow_html=True)
    rank = int(v.tr.numerical_rank[t])
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figs.state_heatmap(v.tr.states[t].tolist(), f"State S_t after token {t} ({lab.RULES[v.rule]})"),
                        key="lab_state")
        st.caption(f"{v.where} · {lab.RULES[v.rule]}. Notice: each token adds one rank-one term k uᵀ; the delta rule "
                   "first erases what the key held.")
    with right:
        st.plotly_chart(figs.spectrum(v.tr.singular_values[t].tolist(), rank, lab.TAU,
                                      f"Singular values of S_t, t = {t}: numerical rank {rank}"), key="lab_spectrum")
        st.caption(f"{v.where} · {lab.RULES[v.rule]}. Notice: values below τ·s₁ do not count as rank.")
    left, right = st.columns(2)
    with left:
        erank = {name: v.traces[r].effective_rank.tolist() for r, name in lab.RULES.items()}
        st.plotly_chart(figs.over_tokens(erank, t, v.tokens, "Effective rank erank(S_t) by rule",
                                         "effective rank (directions)", colors=v.colors, dashed=v.dashed),
                        key="lab_rank")
        st.caption(f"{v.where}. Notice: plain linear attention piles every write onto the same few directions.")
    with right:
        errors = {name: v.traces[r].retrieval_error[t, :t + 1].tolist() for r, name in lab.RULES.items()}
        st.plotly_chart(figs.over_tokens(errors, t, v.tokens[:t + 1], f"What S_t remembers: retrieval error of each "
                                         f"earlier token j ≤ {t}", "‖S_tᵀk_j − w_j‖ / ‖w_j‖", colors=v.colors, dashed=v.dashed),
                        key="lab_retrieval")
        st.caption(f"{v.where}. Notice: 0 = read back exactly; old tokens fade under a decay, get overwritten "
                   "under the delta rule, interfere under linear attention.")
    noise_probe(v, t)
    if v.real:
        partner_view(v, t)
        pruned_view(v, t)


def noise_probe(v: LabView, t: int) -> None:
    st.subheader("Query noise at token t")
    if st.session_state.get(J_FOLLOWS) != t:  # the scrubber moved (or Play stepped): read the token it points at
        state.choose("lab_j", t)
        st.session_state[J_FOLLOWS] = t
    c1, c2 = st.columns(2)
    j = c1.slider("Read the key of token j", 0, max(t, 1), key=state.remembered("lab_j", t, range(t + 1)),
                  disabled=t == 0)
    j = min(int(state.remember("lab_j")), t)
    snr = c2.slider("SNR (dB)", -10, 40, key=state.remembered("lab_snr", 10))
    state.remember("lab_snr")
    with guard():
        p = lab.noise_probe(v.tr.states[t], v.x.k[j], float(snr), written=v.tr.written[j])
    at = p["at"]
    first = lab.validity_label(at["first_valid"], p["first_valid_from_db"])
    second = lab.validity_label(at["second_valid"], p["second_valid_from_db"])
    m1, m2, m3, m4, m5 = st.columns(5)
    m1.metric("Monte Carlo error, q = k + ε", f"{at['mc_raw']:.3g}")
    m2.metric(r"exact RMS $\sigma\|S\|_F/\|S^\top k\|$", f"{at['bound_raw']:.3g}")
    only = "" if v.x.unit_keys else " (comparison only)"  # a family without an l2 norm on q never reads q̂
    m3.metric(f"Monte Carlo, re-normalised q̂{only}", f"{at['mc_renorm']:.3g}")
    m4.metric(f"second-order prediction, q̂{only}", f"{at['second_order']:.3g}", help=second)
    if "retrieval_raw" in at:
        m5.metric(f"error vs $w_{{{j}}}$ with this noise", f"{at['retrieval_raw']:.3g}",
                  help=r"exact RMS of $\|S^\top q - w_j\|/\|w_j\|$: $\sqrt{e^2 + \sigma^2\|S\|_F^2/\|w_j\|^2}$, "
                       f"e = {v.tr.retrieval_error[t, j]:.3g} without noise")
    st.plotly_chart(figs.noise_curves(p, float(snr), f"Reading token {j} from S_{t}: relative error vs SNR",
                                      first, second, comparison_only=not v.x.unit_keys), key="lab_noise")
    st.caption(f"{v.where} · {lab.RULES[v.rule]} · 256 draws, seed 0 · first order {first}, second order {second}. "
               "Notice: a state of low rank or large κ amplifies the same query noise more.")


def partner_view(v: LabView, t: int) -> None:
    """This head beside a head of the other rank group of its layer (the heads study's groups), at the same token."""
    st.subheader("Beside a head of the other rank group")
    if not st.toggle("Show a low-rank and a high-rank head of this layer side by side", key="lab_partner",
                     help="Groups from the heads study (States & rank: head groups; `python -m analysis heads`)."):
        return
    found = v.partner_of(v.ctx, v.layer, v.head)
    if found is None:
        st.info(f"Layer {v.layer} has one group only (or one head): no head of another group to show.")
        return
    other, other_group, mine = found
    pargs = (v.ctx.key, v.text, int(v.layer), int(other))
    with guard(), first_time(data.head_traces.is_cached(*pargs), f"Reading the text for head {other}…",
                             f"Head {other} precomputed") as report:
        partner = data.head_traces(*pargs, progress=report)["traces"][v.rule]
    columns = st.columns(2)
    for col, (h, group, tr) in zip(columns, ((v.head, mine, v.tr), (other, other_group, partner))):
        with col:
            rank = int(tr.numerical_rank[t])
            st.plotly_chart(figs.spectrum(tr.singular_values[t].tolist(), rank, lab.TAU,
                                          f"Head {h} ({group}-rank), t = {t}: numerical rank {rank}"),
                            key=f"lab_partner_spectrum_{h}")
            st.plotly_chart(figs.state_heatmap(tr.states[t].tolist(), f"S_t of head {h} ({group}-rank)"),
                            key=f"lab_partner_state_{h}")
    st.caption(f"{v.where} · {lab.RULES[v.rule]} · groups from the heads study (three inputs). Notice: head {v.head} "
               f"has numerical rank {int(v.tr.numerical_rank[t])} here, head {other} "
               f"{int(partner.numerical_rank[t])}.")


def pruned_view(v: LabView, t: int) -> None:
    """The same head with fewer key channels, beside the original (real inputs only)."""
    st.subheader("What if dk were smaller?")
    c1, c2 = st.columns(2)
    family = adapter_for(v.ctx.model)
    rotations = family.rotations  # PCA mixes channels: not offered where each has its own decay
    names = [name for name, strat in STRATEGIES.items() if strat.axis_aligned or rotations]
    strategy = c1.selectbox("Strategy", names, format_func=lambda s: STRATEGIES[s].label,
                            key=state.remembered("lab_strategy", "l1", names))
    state.remember("lab_strategy")
    ratio = c2.slider("Pruning ratio ρ (dk′ = dk(1 − ρ))", 0.0, 0.9, key=state.remembered("lab_ratio", 0.5), step=0.05)
    state.remember("lab_ratio")
    pargs = (v.ctx.key, v.text, int(v.layer), int(v.head), strategy, float(ratio))
    with guard(), first_time(data.pruned_traces.is_cached(*pargs), "Pruning this head's keys…",
                             "Pruned head computed") as report:
        pruned = data.pruned_traces(*pargs, progress=report)
    pt = pruned["traces"][v.rule]
    dk_p = pruned["inputs"].dims[0]
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figs.state_heatmap(pt.states[t].tolist(), f"Pruned state S_t after token {t}: dk′ = {dk_p}"),
                        key="lab_pruned_state")
    with right:
        rank_p = int(pt.numerical_rank[t])
        st.plotly_chart(figs.spectrum(pt.singular_values[t].tolist(), rank_p, lab.TAU,
                                      f"Singular values, dk′ = {dk_p}: numerical rank {rank_p}",
                                      v.tr.singular_values[t].tolist(), f"original dk = {v.x.dims[0]}"),
                        key="lab_pruned_spectrum")
    left, right = st.columns(2)
    with left:
        curves = {f"{v.rule} dk = {v.x.dims[0]}": v.tr.effective_rank.tolist(),
                  f"{v.rule} dk′ = {dk_p}": pt.effective_rank.tolist()}
        st.plotly_chart(figs.over_tokens(curves, t, v.tokens, f"Effective rank, original vs pruned ({strategy})",
                                         "effective rank (directions)", dashed=[f"{v.rule} dk′ = {dk_p}"],
                                         colors=[figs.RULE_COLORS[v.rule]] * 2),
                        key="lab_pruned_rank")
    with right:
        errs = {f"{v.rule} dk = {v.x.dims[0]}": v.tr.retrieval_error[t, :t + 1].tolist(),
                f"{v.rule} dk′ = {dk_p}": pt.retrieval_error[t, :t + 1].tolist()}
        st.plotly_chart(figs.over_tokens(errs, t, v.tokens[:t + 1], f"Retrieval error at t = {t}, original vs pruned",
                                         "‖S_tᵀk_j − w_j‖ / ‖w_j‖", dashed=[f"{v.rule} dk′ = {dk_p}"],
                                         colors=[figs.RULE_COLORS[v.rule]] * 2),
                        key="lab_pruned_retrieval")
    st.caption(f"{v.where} · {lab.RULES[v.rule]} · {STRATEGIES[strategy].label}, ρ = {ratio:g}: "
               + pruned_words(v.x.unit_keys, family.readout_scaled)
               + ". Notice: fewer key rows, fewer directions to store associations in.")


def pruned_words(unit_keys: bool, scaled: bool) -> str:
    """What pruning did to this head's inputs, as its family runs them (no l2 norm or readout scale it lacks)."""
    return ("channels zeroed after the convolution, "
            + ("keys re-normalised (the layer l2-normalises them)" if unit_keys else
               "keys not re-normalised (this family feeds them to the scan as they are)")
            + (", readout scale unchanged" if scaled else ", no readout scale (this family has none)"))

