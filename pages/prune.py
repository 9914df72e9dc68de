"""Prune: uniform or per-layer ratios (suggested from the rank profile, tile-aware); run, compare, save."""
import json
import uuid
from pathlib import Path

import pandas as pd
import streamlit as st

from analysis.io import writes
from analysis.io.export import carry_recall_task, model_zip
from analysis.measure import measure
from analysis.models import TILE_ROWS
from analysis.prune import RESCALES, ROUNDINGS, plan_key_dims, prune, pruning_metadata, save_model, tiles
from analysis.recovery import recover
from analysis.strategies import STRATEGIES
from ui import cache, frame, jobs, save_guard, sensitivity_view, shrink, shrink_figures, state
from ui.context import current
from ui.errors import guard
from ui.explain import explainer
from ui.ratios import per_layer_ratios
from ui.shrink_report import before_after_table, kernel_label, recovery_verdict

SESSION = "pruned"  # this session's pruned model and its measurements (never shared, never cached)

frame.ensure()  # a deep link may arrive before app.py ran: render inside its frame

st.title("Prune")
explainer(
    "Structured pruning of query/key channels: per linear-attention layer ℓ and key head, the same kept index set "
    "slices the query and key projection rows and their short-convolution channels (and, where the decay is per key "
    "channel, its decay rows; softmax-attention layers of a hybrid are never touched), so the state shrinks from dk × dv to "
    "dk' × dv. The pruned model keeps the original readout scale dk^-½, so it equals the original model with the "
    "dropped channels zeroed (fla's default dk'^-½, the reference code's choice, is offered below). "
    "Ratios can be uniform or per layer, set beside each layer's **rank utilization** (from the "
    "States & rank trace of the sidebar inputs); *Suggest from rank* prunes low-utilization layers more while "
    "keeping the mean ratio at the target. fla's chunk kernel walks dk' in tiles of 64 rows, so the kernel time "
    "follows the tile count ⌈dk'/64⌉: only a dk' that is a multiple of 64 fills every tile, and only crossing a "
    "multiple of 64 saves one. Rounding to 16 or 32 merely avoids odd widths inside a tile (the kernel pads its "
    "blocks to a power of two, at least 16); the last tile stays partly empty. Pruning builds a **new** model held in this session only; the shared model is never changed. "
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
rescale = shrink.rescale_control()


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
    timed = e3.checkbox("Time the kernel (every layer's key dim)", key=state.remembered("prune_latency", True))
    state.remember("prune_latency")
    if ctx.task is None:  # a typed value outside a field's range is shown in red and not applied: say what is used
        st.caption(f"In use: context {context}, {max_tokens:,} tokens to score (a field accepts context 16–4,096 "
                   "and 64–1,000,000 tokens; a red value outside that is not applied).")
pairs = shrink.recall_pairs(ctx)
tok = None if ctx.task is not None else cache.tokenizer(ctx.key.path)

prune_key = json.dumps({"model": list(ctx.key), "strategy": strategy, "dims": planned, "calibration": list(settings),
                        "context": context, "tokens": max_tokens, "pairs": pairs, "recall": recall_sequences,
                        "timed": timed, "rescale": rescale})  # the job belongs to these inputs
if jobs.controls("prune", prune_key, "Prune", run_key="prune_run"):
    # resolved here, in the script run: the job's thread gets plain objects and never calls Streamlit
    model, key, needs, use = ctx.model, ctx.key, STRATEGIES[strategy], shrink.using(ctx.key)
    calibrated = shrink.calibration.bind(key, settings, _using=use)
    measured_before = shrink.baseline.bind(key, context, max_tokens, pairs, recall_sequences, timed, _using=use)

    def prune_work(job):
        calib = None
        if needs.needs_calibration:
            what = f"calibrating on {settings.sequences} sequences × {settings.tokens} tokens"
            job.report(0.02, f"{what}…")
            calib = calibrated(progress=lambda f, text: job.report(0.02 + 0.13 * f, f"{what}: {text}"),
                               cancel=job.cancelled)
            if needs.needs_gradients:
                job.report(0.15, "backward pass: gradients of the query/key projections for the Taylor scores…")
                with use.lock:
                    calib.gradients(cancel=job.cancelled)  # kept on the shared calibration, as the memo did
        job.report(0.25, "choosing channels and building a new model (the shared model is not changed)…")
        with use.lock:
            result = prune(model, strategy, planned, calib, seed=settings.seed, rescale=rescale)
        result.model.analysis_source = key.path  # recall models find their task beside the source
        job.report(0.4, "measuring the unpruned model (cached per setting)…")
        before = measured_before(progress=lambda f, text: job.report(0.4 + 0.15 * f, text), cancel=job.cancelled)
        job.report(0.55, "measuring the pruned model…")
        after = measure(result.model, tok, "test", context, max_tokens, recall_pairs=pairs,
                        recall_sequences=recall_sequences, latency=timed, cancel=job.cancelled,
                        progress=lambda f: job.report(0.55 + 0.45 * f, f"perplexity of the pruned model: {f:.0%}"))
        return {"key": key, "id": uuid.uuid4().hex, "result": result, "ratios": ratios or ratio, "before": before,
                "after": after, "recovered": None, "calib": calib and calib.label}

    jobs.launch("prune", prune_key, f"{ctx.name} with {needs.label} to dk' = {planned}", prune_work)

prune_job = jobs.get("prune")
if prune_job is not None and prune_job.state == "done" and not prune_job.taken:
    st.session_state[SESSION], prune_job.taken = prune_job.result, True
if jobs.unsettled(prune_job):
    with st.status(f"Pruning {prune_job.label}…", expanded=True):
        if prune_job.key != prune_key:
            st.caption("Started for other settings than the ones above; it goes on, and its result appears here.")
        st.caption("You can open other pages meanwhile: the prune goes on, and this page shows it when you return.")
        bar = st.progress(0.0)
        jobs.follow(prune_job, lambda j: bar.progress(j.fraction, text=j.text))
    st.rerun()  # take the result (or show the error) and redraw the buttons
if prune_job is not None and prune_job.state == "failed":
    st.error(prune_job.error)
elif prune_job is not None and prune_job.state == "stopped":
    st.info(f"The prune of {prune_job.label} was stopped before it finished; press **Prune** to run it again.")

run = st.session_state.get(SESSION)
if not run or run["key"] != ctx.key:
    st.info("Set the ratios and press **Prune**: the before/after comparison, recovery and saving appear here.")
    st.stop()

rec_job = jobs.get("recovery")
if rec_job is not None and rec_job.state == "done" and not rec_job.taken and rec_job.result["for"] == run["id"]:
    run["recovered"], rec_job.taken = rec_job.result, True
result = run["result"]
st.subheader(f"Before and after: {shrink.strategy_label(result.strategy)}, dk {result.original_dims} → {result.dims}")
columns = {"before": run["before"], "after pruning": run["after"]}
if run["recovered"]:
    columns["after recovery"] = run["recovered"]["measure"]
st.table(before_after_table(columns))
notes = [f"{ctx.name} · device {ctx.key.device} · dtype {ctx.key.dtype} · {RESCALES[result.info['rescale']]}",
         "Δ and %: change from the unpruned model (lower perplexity and kernel time are better)"]
if "kernel" in run["after"]:
    notes.append(f"kernel timing: {kernel_label(run['after']['kernel'])}; a Δ inside the larger IQR is noise")
notes.append(f"calibration: {run['calib'] or 'none (data-free strategy)'}")
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
    recover_key = json.dumps({"prune": run["id"], "steps": steps, "lr": lr, "batch": batch, "seq": seq_len,
                              "context": context, "tokens": max_tokens})
    if jobs.controls("recovery", recover_key, "Run recovery", run_key="recover_run"):
        pruned_model, run_id, source = result.model, run["id"], ctx.key.path

        def recover_work(job):
            model, losses = recover(pruned_model, tok, steps=steps, lr=lr, batch=batch, seq_len=seq_len,
                                    seed=settings.seed, cancel=job.cancelled,
                                    progress=lambda s, n, loss: job.report(0.8 * s / n, f"step {s}/{n}, loss {loss:.3f}"))
            model.analysis_source = source
            job.report(0.8, "measuring the recovered model…")
            measured = measure(model, tok, "test", context, max_tokens, latency=False, cancel=job.cancelled,
                               progress=lambda f: job.report(0.8 + 0.2 * f, f"perplexity after recovery: {f:.0%}"))
            return {"for": run_id, "model": model, "measure": measured, "steps": steps, "final_loss": losses[-1]}

        rec_job = jobs.launch("recovery", recover_key, f"{steps} steps at learning rate {lr:g}", recover_work)
    if jobs.unsettled(rec_job):
        with st.status(f"Recovery: {rec_job.label}…", expanded=True):
            rec_bar = st.progress(0.0)
            jobs.follow(rec_job, lambda j: rec_bar.progress(j.fraction, text=j.text))
        st.rerun()  # redraw the table with the new column
    if rec_job is not None and rec_job.state == "failed":
        st.error(rec_job.error)
    if run["recovered"]:
        rec = run["recovered"]
        verdict = recovery_verdict(run["after"], rec["measure"])
        said = (f"{rec['steps']} recovery steps (final training loss {rec['final_loss']:.3f}): {verdict['text']}. "
                "Saving and download use the recovered model.")
        {"better": st.success, "worse": st.warning}.get(verdict["verdict"], st.info)(said)
        if verdict["verdict"] != "better":
            st.button("Discard the recovery (keep the pruned model)", key="recover_discard",
                      on_click=lambda: run.update(recovered=None))

st.subheader("Save or download")
final = run["recovered"]["model"] if run["recovered"] else result.model
metadata = {**pruning_metadata(result, ctx.key.path, run["ratios"]),
            "evaluation": {k: v for k, v in columns.items()}}
base = Path(ctx.name).name
tag = f"{base}-{result.strategy}-dk{'_'.join(map(str, result.dims))}"
st.download_button("Download the pruned model (.zip)",  # zipped only on click, in Streamlit's download thread
                   data=lambda: model_zip(final, tag, tok, metadata, source=ctx.key.path),
                   file_name=f"{tag}.zip", mime="application/zip", on_click="ignore", key="prune_download")
local = writes.local_paths_allowed()  # STATE_RANK_LOCAL=1: any local path; otherwise a name under one root
root = writes.output_root()
suggested = str(root / tag) if local else tag
if state.get("prune_out_auto", True) and state.get("prune_out_tag") != tag:  # follow the newest prune until edited
    state.choose("prune_out", suggested)
    st.session_state["prune_out_tag"] = tag
s1, s2 = st.columns([3, 1], vertical_alignment="bottom")
target = s1.text_input("Save to directory" if local else "Save as (folder name)",
                       key=state.remembered("prune_out", suggested),
                       on_change=lambda: st.session_state.update(prune_out_auto=False))
state.remember("prune_out")
overwrite = s2.checkbox("Overwrite if it exists", key="prune_overwrite",
                        help="Replaces only a model folder this tool saved; nothing else is ever replaced.")
st.caption(f"Relative paths are saved under {root}; any local path is allowed ({writes.LOCAL_ENV}=1)." if local
           else f"Models are saved under {root} (set {writes.OUTPUT_ROOT_ENV} to change it).")
seen = save_guard.shown("prune", target, local)  # what the previous run showed there (Overwrite replaces only that)
if st.button("Save", key="prune_save"):
    with guard():
        dest = writes.output_target(target, local)
        with save_guard.unchanged(dest, seen, overwrite):
            out = save_model(final, dest, tokenizer=tok, metadata=metadata, overwrite=overwrite,
                             extra=lambda folder: carry_recall_task(ctx.key.path, folder))
    save_guard.saved("prune", out)
    st.success(f"Saved to {out} (safetensors; loads with AutoModelForCausalLM.from_pretrained after `import analysis; analysis.ready()`).")
