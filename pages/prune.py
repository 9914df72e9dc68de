"""Prune: uniform or per-layer ratios (suggested from the rank profile, tile-aware); run, compare, save."""
from pathlib import Path

import pandas as pd
import streamlit as st

from analysis.errors import AnalysisError
from analysis.export import carry_recall_task, model_zip
from analysis.measure import measure
from analysis.models import REPO_ROOT, TILE_ROWS
from analysis.prune import ROUNDINGS, plan_key_dims, prune, pruning_metadata, save_model, tiles
from analysis.recovery import recover
from analysis.strategies import STRATEGIES
from ui import cache, frame, sensitivity_view, shrink, shrink_figures, state
from ui.context import current
from ui.errors import guard
from ui.explain import explainer
from ui.ratios import per_layer_ratios
from ui.shrink_report import before_after_table, kernel_label

SESSION = "pruned"  # this session's pruned model and its measurements (never shared, never cached)

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Prune")
explainer(
    "Structured pruning of query/key channels: per layer ℓ and head, the same kept index set slices the rows "
    "of q_proj and k_proj and the channels of q_conv1d and k_conv1d, so the state shrinks from dk × dv to "
    "dk' × dv. Ratios can be uniform or per layer, set beside each layer's **rank utilization** (from the "
    "States & rank trace of the sidebar inputs); *Suggest from rank* prunes low-utilization layers more while "
    "keeping the mean ratio at the target. Rounding dk' to a multiple of 16/32/64 keeps fla's 64-row kernel "
    "tiles full. Pruning builds a **new** model held in this session only; the shared model is never changed. "
    "The table compares the model before and after on the test split (or, for a recall model, recall accuracy).",
    [r"d_k' = d_k\,(1-\rho_\ell),\qquad \text{tiles} = \lceil d_k'/64 \rceil,\qquad "
     r"\text{state bytes} = 4\textstyle\sum_\ell H_\ell\,d_{k,\ell}'\,d_v",
     r"u_\ell = \frac{\|S\|_F^2}{s_1^2\,\min(d_k, d_v)},\qquad "
     r"1-\rho_\ell = \operatorname{clip}\big(c\,u_\ell,\ 1-\rho_{\max},\ 1-\rho_{\min}\big),\quad "
     r"\textstyle\sum_\ell d_{k,\ell}\,\rho_\ell = \bar\rho \sum_\ell d_{k,\ell}",
     r"\mathrm{PPL} = \exp\Big(-\frac{1}{N}\sum_{t} \log p(x_t \mid x_{<t})\Big)"])

ctx = current()
dims, n_layers = ctx.info.head_k_dims, ctx.info.layers
settings = shrink.calibration_controls(ctx)
names = list(STRATEGIES)
c1, c2, c3 = st.columns(3)
strategy = c1.selectbox("Strategy", names, format_func=shrink.strategy_label,
                        key=state.remembered("prune_strategy", "wanda", names))
state.remember("prune_strategy")
modes = ["Uniform", "Per layer"]
mode = c2.radio("Ratios", modes, horizontal=True, key=state.remembered("prune_mode", "Uniform", modes))
state.remember("prune_mode")
roundings = [r or 0 for r in ROUNDINGS]  # 0 stands for None: a selectbox shows None as "no choice"
rounding = c3.selectbox("Round dk' to kernel tiles", roundings,
                        format_func=lambda r: "no rounding" if not r else f"multiple of {r}",
                        key=state.remembered("prune_round", 0, roundings)) or None
state.remember("prune_round")
st.caption(STRATEGIES[strategy].description)


ratio, ratios = None, None
if mode == "Uniform":
    ratio = st.slider("Pruning ratio ρ (all layers)", 0.0, 0.95, key=state.remembered("prune_ratio", 0.5), step=0.05)
    state.remember("prune_ratio")
else:
    ratios = per_layer_ratios(ctx, rounding)

with guard():
    planned = plan_key_dims(ctx.model, ratio=ratio, ratios=ratios, round_to=rounding)

left, right = st.columns([2, 3])
with left:
    plan = pd.DataFrame({"dk": dims, "ρ": ratios or [ratio] * n_layers, "dk'": planned,
                         "tiles now": tiles(dims), "tiles after": tiles(planned)},
                        index=pd.Index(range(n_layers), name="layer"))
    st.table(plan.style.format({"ρ": "{:.3f}"}))
    state_after = sum(ctx.info.value_heads * d * ctx.info.head_v_dim * 4 for d in planned)
    st.caption(f"{ctx.name} · fp32 state bytes per sequence {ctx.info.state_bytes_per_sequence:,} → {state_after:,} · "
               f"kernel tiles of {TILE_ROWS} key rows per head · device {ctx.key.device} · dtype {ctx.key.dtype}")
with right:
    st.plotly_chart(shrink_figures.key_dim_plan(dims, planned, TILE_ROWS), key="prune_plan")

sensitivity_view.section(ctx, strategy, settings, rounding)  # layer-sensitivity map + allocator (ui/sensitivity_view.py)

with st.expander("Evaluation settings (test split; kernel timing)"):
    e1, e2, e3 = st.columns(3)
    if ctx.task is None:
        context = int(e1.number_input("Context (tokens)", 16, 4096, key=state.remembered("eval_context", 256), step=64))
        state.remember("eval_context")
        max_tokens = int(e2.number_input("Tokens to score", 64, 10**6, key=state.remembered("eval_tokens", 4096),
                                         step=1024))
        state.remember("eval_tokens")
        recall_sequences = 0
    else:
        context, max_tokens = 0, 0
        recall_sequences = int(e1.number_input("Recall sequences per pair count", 8, 4096,
                                               key=state.remembered("recall_sequences_eval", 64), step=8))
        state.remember("recall_sequences_eval")
    timed = e3.checkbox("Time the kernel at the layer-0 key dim", key=state.remembered("prune_latency", True))
    state.remember("prune_latency")
pairs = shrink.recall_pairs(ctx)
tok = None if ctx.task is not None else cache.tokenizer(ctx.key.path)

if st.button("Prune", type="primary", key="prune_run"):
    with guard():
        needs = STRATEGIES[strategy]
        calib = shrink.prepare(ctx.key, settings, needs.needs_gradients) if needs.needs_calibration else None
        with st.status(f"Pruning with {needs.label} to dk' = {planned}…", expanded=True) as box:
            st.write("Choosing channels and building a new model (the shared model is not changed)…")
            with cache.compute_lock():
                result = prune(ctx.model, strategy, planned, calib, seed=settings.seed)
            result.model.analysis_source = ctx.key.path  # recall models find their task beside the source
            st.write("Measuring the unpruned model (cached per setting)…")
            before = shrink.baseline(ctx.key, context, max_tokens, pairs, recall_sequences, timed)
            bar = st.progress(0.0, text="Measuring the pruned model…")
            after = measure(result.model, tok, "test", context, max_tokens, recall_pairs=pairs,
                            recall_sequences=recall_sequences, latency=timed,
                            progress=lambda f: bar.progress(f, text=f"perplexity of the pruned model: {f:.0%}"))
            bar.progress(1.0, text="done")
            box.update(label=f"Pruned with {needs.label}: dk {dims} → {planned}", state="complete")
        st.session_state[SESSION] = {"key": ctx.key, "result": result, "ratios": ratios or ratio,
                                     "before": before, "after": after, "recovered": None, "calib": calib and calib.label}

run = st.session_state.get(SESSION)
if not run or run["key"] != ctx.key:
    st.info("Set the ratios and press **Prune**: the before/after comparison, recovery and saving appear here.")
    st.stop()

result = run["result"]
st.subheader(f"Before and after: {shrink.strategy_label(result.strategy)}, dk {result.original_dims} → {result.dims}")
columns = {"before": run["before"], "after pruning": run["after"]}
if run["recovered"]:
    columns["after recovery"] = run["recovered"]["measure"]
st.table(before_after_table(columns))
notes = [f"{ctx.name} · device {ctx.key.device} · dtype {ctx.key.dtype}"]
if "kernel" in run["after"]:
    notes.append(f"kernel timing: {kernel_label(run['before']['kernel'])} (before) and dk{result.dims[0]} (after)")
if run["calib"]:
    notes.append(f"calibration: {run['calib']}")
st.caption(" · ".join(notes))

st.subheader("Recovery fine-tune (optional)")
if ctx.task is not None:
    st.info("Recovery trains on text, and this recall model has no tokenizer; it is offered for language models.")
else:
    r1, r2, r3, r4 = st.columns(4)
    steps = int(r1.number_input("Steps", 1, 10_000, key=state.remembered("recover_steps", 20), step=10))
    state.remember("recover_steps")
    lr = float(r2.number_input("Learning rate", 1e-6, 1e-1, key=state.remembered("recover_lr", 1e-3), format="%.0e"))
    state.remember("recover_lr")
    batch = int(r3.number_input("Batch (sequences)", 1, 64, key=state.remembered("recover_batch", 8), step=1))
    state.remember("recover_batch")
    seq_len = int(r4.number_input("Tokens per sequence", 16, 2048, key=state.remembered("recover_seq", 256), step=64))
    state.remember("recover_seq")
    st.caption("Only the pruned q/k projections and convolutions learn (AdamW, cosine schedule), on train-split "
               "windows; the perplexity is then measured again with the settings above.")
    if st.button("Run recovery", key="recover_run"):
        with guard():
            bar = st.progress(0.0, text="recovery…")
            model, losses = recover(result.model, tok, steps=steps, lr=lr, batch=batch, seq_len=seq_len,
                                    seed=settings.seed,
                                    progress=lambda s, n, loss: bar.progress(s / n, text=f"step {s}/{n}, loss {loss:.3f}"))
            model.analysis_source = ctx.key.path
            bar.progress(1.0, text="measuring the recovered model…")
            measured = measure(model, tok, "test", context, max_tokens, latency=False)
            run["recovered"] = {"model": model, "measure": measured, "steps": steps, "final_loss": losses[-1]}
            st.rerun()  # redraw the table with the new column
    if run["recovered"]:
        rec = run["recovered"]
        st.success(f"Recovered with {rec['steps']} steps (final training loss {rec['final_loss']:.3f}); saving and "
                   "download use the recovered model.")

st.subheader("Save or download")
final = run["recovered"]["model"] if run["recovered"] else result.model
metadata = {**pruning_metadata(result, ctx.key.path, run["ratios"]),
            "evaluation": {k: v for k, v in columns.items()}}
base = Path(ctx.name).name
tag = f"{base}-{result.strategy}-dk{'_'.join(map(str, result.dims))}"
st.download_button("Download the pruned model (.zip)",  # zipped only on click, in Streamlit's download thread
                   data=lambda: model_zip(final, tag, tok, metadata, source=ctx.key.path),
                   file_name=f"{tag}.zip", mime="application/zip", on_click="ignore", key="prune_download")
if state.get("prune_out_auto", True) and state.get("prune_out_tag") != tag:  # follow the newest prune until edited
    state.choose("prune_out", str(REPO_ROOT / "runs" / tag))
    st.session_state["prune_out_tag"] = tag
s1, s2 = st.columns([3, 1], vertical_alignment="bottom")
target = s1.text_input("Save to directory", key=state.remembered("prune_out", str(REPO_ROOT / "runs" / tag)),
                       on_change=lambda: st.session_state.update(prune_out_auto=False))
state.remember("prune_out")
overwrite = s2.checkbox("Overwrite if it exists", key="prune_overwrite")
if st.button("Save", key="prune_save"):
    with guard():
        if not target.strip():
            raise AnalysisError("Give a directory to save the pruned model to.")
        out = save_model(final, target.strip(), tokenizer=tok, metadata=metadata, overwrite=overwrite)
        carry_recall_task(ctx.key.path, out)
    st.success(f"Saved to {out} (safetensors; loads with AutoModelForCausalLM.from_pretrained after `import analysis`).")
