"""Issue 22 on the Prune page (AppTest, tiny random-init model): the method picker's default (lora-kd) runs with
its settings and draws the loss curve; a recovery stopped with its state saved is offered as Resume, and
resuming continues from the saved step."""
import pytest

from analysis.runtime.cancel import Cancelled
from analysis.io.writes import output_root
from analysis.shrink.recovery import RecoverySettings, recover
from helpers.app import click, open_page

pytestmark = pytest.mark.usefixtures("one_torch_thread", "sweep_cache")


def test_a_stopped_recovery_resumes_on_the_page(monkeypatch, lm_dir, tmp_path):
    monkeypatch.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp_path))
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("l1")
    at.selectbox(key="w:prune_round").set_value(16).run()
    click(at, "prune_run")
    inputs = {"w:recover_steps": 4, "w:recover_batch": 2, "w:recover_seq": 32, "w:recover_rank": 8,
              "w:recover_eval_every": 2}
    for key, value in inputs.items():
        at.number_input(key=key).set_value(value)
    at.run()
    assert at.selectbox(key="w:recover_method").value == "lora-kd"  # the reference's recovery is the default
    run = at.session_state["pruned"]
    # what Stop leaves after two finished steps (the same settings the page builds from its inputs)
    settings = RecoverySettings(method="lora-kd", steps=4, lr=1e-4, batch=2, seq_len=32, rank=8, eval_every=2, seed=0)
    steps = []  # the stop arrives once two steps have reported (it is checked inside steps too, not only between)
    state = output_root() / "recovery-state" / run["id"]
    from analysis.data import corpus as data
    with pytest.raises(Cancelled):
        recover(run["result"].model, data.load_tokenizer(), settings, teacher=run["result"].model,
                progress=lambda e: e["kind"] == "train" and steps.append(e["step"]), cancel=lambda: len(steps) >= 2,
                state_dir=state)
    at.run()
    assert any("A stopped recovery of this pruned model is saved" in i.value for i in at.info)
    click(at, "recover_resume")
    rec = at.session_state["pruned"]["recovered"]
    assert rec["recovery"]["resumed_from"] == 2 and [h["step"] for h in rec["history"]] == [1, 2, 3, 4]
    assert rec["method"] == "lora-kd" and not state.exists()
    assert list(at.table[1].value.columns)[4:] == ["after recovery", "Δ after recovery", "% after recovery"]
    assert at.table[1].value.loc["method", "after recovery"].startswith("lora-kd (LoRA + distillation")
    curves = [c.proto.spec for c in at.get("plotly_chart") if "KD term" in c.proto.spec]
    assert curves and "validation perplexity" in curves[0] and "cross-entropy" in curves[0]  # the loss curve
    kept, checks = rec["recovery"]["kept_step"], rec["validation"]
    [line] = [c.value for c in at.caption if c.value.startswith("Notice: ") and "validation" in c.value]
    assert (f"recovery keeps step {kept}'s weights" in line) if kept else ("no validation check improved" in line)
    assert f"{checks[0]['perplexity']:.4g} at step 0" in line or f"perplexity {checks[0]['perplexity']:.4g}" in line
