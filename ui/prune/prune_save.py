"""The Prune page's Save / Download: the model the user picked (by default the better one of pruned and
recovered, by the measured perplexity), under a name that says which."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from analysis.io import writes
from ui.shared import state
from ui.shared.context import Context
from ui.shared.errors import guard
from ui.shared.shrink_report import recovery_verdict
from ui.prune import save_guard

PRUNED, RECOVERED = "pruned", "recovered"


def which(run: dict) -> str:
    """Pruned or recovered: asked when there is a recovery, defaulting to the one with the lower perplexity."""
    rec = run["recovered"]
    if not rec:
        return PRUNED
    ppl = {PRUNED: run["after"]["perplexity"]["perplexity"], RECOVERED: rec["measure"]["perplexity"]["perplexity"]}
    comparable = recovery_verdict(run["after"], rec["measure"])["verdict"] != "not comparable"
    better = comparable and ppl[RECOVERED] < ppl[PRUNED]
    return state.field(st.radio, "Model to save and download", "prune_save_which", RECOVERED if better else PRUNED,
                       options=[PRUNED, RECOVERED], horizontal=True, scope=rec["id"],
                       format_func=lambda w: f"{w} (test perplexity {ppl[w]:.2f})"
                                             + (f", {rec['steps']} steps" if w == RECOVERED else ""),
                       help="By default the one with the lower measured perplexity.")


def section(ctx: Context, run: dict, tok) -> None:
    st.subheader("Save or download")
    result, chosen, rec = run["result"], which(run), run["recovered"]
    saved = run["prune_run"].recovered(rec["model"], rec["measure"], rec["recovery"]) if chosen == RECOVERED \
        else run["prune_run"]
    tag = f"{Path(ctx.name).name}-{result.strategy}-dk{'_'.join(map(str, result.dims))}" + (
        "-recovered" if chosen == RECOVERED else "")
    st.download_button(f"Download the {chosen} model (.zip)",  # zipped only on click, in Streamlit's download thread
                       data=lambda: saved.zip(tag, tok), file_name=f"{tag}.zip", mime="application/zip",
                       on_click="ignore", key="prune_download")
    local = writes.local_paths_allowed()  # STATE_RANK_LOCAL=1: any local path; otherwise a name under one root
    root = writes.output_root()
    suggested = str(root / tag) if local else tag
    scope = ctx.key.path  # a name typed for one model belongs to it: another model never inherits it
    auto, shown_tag = f"prune_out_auto@{scope}", f"prune_out_tag@{scope}"
    if st.session_state.get(auto, True) and st.session_state.get(shown_tag) != tag:  # follow the newest until edited
        state.choose("prune_out", suggested, scope)
        st.session_state[shown_tag] = tag
    s1, s2 = st.columns([3, 1], vertical_alignment="bottom")
    target = state.field(s1.text_input, "Save to directory" if local else "Save as (folder name)", "prune_out",
                         suggested, scope=scope, on_change=lambda: st.session_state.update({auto: False}))
    overwrite = s2.checkbox("Overwrite if it exists", key="prune_overwrite",
                            help="Replaces only a model folder this tool saved; nothing else is ever replaced.")
    st.caption((f"Relative paths are saved under {root}; any local path is allowed ({writes.LOCAL_ENV}=1)." if local
                else f"Models are saved under {root} (set {writes.OUTPUT_ROOT_ENV} to change it).")
               + f" Saving the **{chosen}** model.")
    seen = save_guard.shown("prune", target, local)  # what the previous run showed there (Overwrite replaces only that)
    if st.button("Save", key="prune_save"):
        with guard():
            dest = writes.output_target(target, local)
            with save_guard.unchanged(dest, seen, overwrite):
                out = saved.save(dest, tok, overwrite=overwrite)
        save_guard.saved("prune", out)
        st.success(f"Saved to {out}: the {chosen} model (safetensors, with its model card README.md; "
                   + ("it carries its own modeling code, so AutoModelForCausalLM.from_pretrained(folder, "
                      "trust_remote_code=True, use_safetensors=True) loads it without this project, and the dashboard loads it as it is)."
                      if any(out.glob("modeling_*.py")) else
                      "the family's own type: AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True) loads it, after `import fla` "
                      "for a model of fla's)."))
