"""The Query noise page under AppTest: closed forms at once, Monte Carlo and the recall curve only on a click (jobs,
with progress; Stop ends them in one sentence and a second click finishes them), directions only within the numerical
rank, predictions only inside their validity range."""
import json
import re

import pytest
import torch
from streamlit.testing.v1 import AppTest

from family_cases.text_lm import build_tiny
from helpers.app import APP, assert_clean, charts
from ui.shared import job_runner

PAGE = "pages/query_noise.py"
pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


def save_rank_one_lm(path):
    """A tiny DeltaNet whose layer-0 keys are all parallel (every key channel shares one projection row and
    one conv kernel), so every layer-0 state is exactly rank 1 — a real model, like a collapsed trained head."""
    model = build_tiny("delta_net")
    attn = model.model.layers[0].attn
    with torch.no_grad():
        attn.k_proj.weight.copy_(attn.k_proj.weight[:1].expand_as(attn.k_proj.weight))
        attn.k_conv1d.weight.copy_(attn.k_conv1d.weight[:1].expand_as(attn.k_conv1d.weight))
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def rank_one_dir(tmp_path_factory):
    return save_rank_one_lm(tmp_path_factory.mktemp("rank-one-lm"))



def open_noise(monkeypatch, model_dir, tokens=32) -> AppTest:
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(model_dir))
    at = AppTest.from_file(APP, default_timeout=180).run()
    assert_clean(at)
    at.switch_page("pages/states.py").run()
    at.number_input(key="w:tokens").set_value(tokens).run()
    at.number_input(key="w:sequences").set_value(3).run()
    at.switch_page(PAGE).run()
    assert_clean(at)
    return at


def markers(spec) -> list[dict]:
    return [t for t in spec["data"] if t["mode"] == "markers"]


def progress_texts(at) -> list[str]:
    return [json.loads(json.dumps(p.proto.text)) for p in at.get("progress")]


def test_monte_carlo_runs_only_after_the_click_with_progress(monkeypatch, rank_one_dir, caches_only_in_script_runs):
    at = open_noise(monkeypatch, rank_one_dir)
    assert all("theorem text is not available" not in m.value for m in at.markdown)
    assert any("standard results" in m.value for m in at.markdown)
    [spec] = charts(at)
    assert not markers(spec) and not at.get("progress")  # predictions only, nothing ran
    assert any("Until it runs" in c.value for c in at.caption)
    assert any(c.value.startswith("Notice:") and "10× less per 20 dB" in c.value for c in at.caption)
    assert spec["layout"]["yaxis"]["type"] == "log"
    at.button(key="noise_mc_run").click().run()  # the run follows the job to its end, then reruns
    assert_clean(at)
    assert at.session_state["bgjob:noise_mc"].state == "done"  # a job (its thread called no Streamlit cache)
    [done] = progress_texts(at)
    assert "steps done" in done
    assert not any("Until it runs" in c.value for c in at.caption)  # it ran: the plot shows the Monte Carlo too
    [spec] = charts(at)
    assert len(markers(spec)) == 2 * len([t for t in spec["data"] if "exact" in t["name"]])  # raw + re-norm per probe
    for trace in markers(spec):
        assert "array" in trace["error_y"] and "arrayminus" in trace["error_y"]  # IQR bars
    # like with like: raw queries have an exact RMS prediction, so the Monte-Carlo RMS must agree with it
    exact = {t["legendgroup"]: t["y"] for t in spec["data"] if "exact" in t["name"]}
    for trace in markers(spec):
        if "raw query" in trace["name"]:
            pairs = [(a, b) for a, b in zip(trace["y"], exact[trace["legendgroup"]]) if a is not None]
            assert pairs and all(abs(a / b - 1) < 0.2 for a, b in pairs), pairs
    table = at.dataframe[-1].value
    assert {"second order vs MC", "first order vs MC", "re-norm.: Monte Carlo", "MC IQR"} <= set(table.columns)
    # the button now says the result is cached; a settings change does not start anything by itself
    assert at.button(key="noise_mc_run").label == "Run again (cached)"
    at.selectbox(key="w:mc_samples").set_value(64).run()
    assert not markers(charts(at)[0]) and at.button(key="noise_mc_run").label == "Run Monte Carlo"


def test_only_directions_within_the_numerical_rank_are_offered(monkeypatch, rank_one_dir):
    at = open_noise(monkeypatch, rank_one_dir)
    at.selectbox(key="w:sel_layer").set_value(0).run()
    assert_clean(at)
    assert at.multiselect(key="w:noise_dirs").options == ["1"]  # layer 0 is rank 1 in every sequence
    assert any("beyond the numerical rank" in c.value and "rank 1" in c.value for c in at.caption)
    closed = at.dataframe[0].value
    assert (closed["numerical rank"].iloc[:3] == "1").all()
    # the table follows the direction picker: only direction 1 is offered (and picked), so no s₂ column
    assert "Σs²/s₁²" in closed.columns and "Σs²/s₂²" not in closed.columns
    assert not any("_" in c for c in closed.columns)  # ‖S‖_F² would show a literal underscore
    names = {t["legendgroup"] for t in charts(at)[0]["data"]}
    assert "direction 2" not in names and "direction 1" in names
    at.selectbox(key="w:sel_layer").set_value(1).run()  # an ordinary layer offers more
    assert len(at.multiselect(key="w:noise_dirs").options) > 1


def test_predictions_outside_their_validity_range_are_labelled_not_drawn(monkeypatch, rank_one_dir):
    at = open_noise(monkeypatch, rank_one_dir)
    at.selectbox(key="w:sel_layer").set_value(0).run()
    at.button(key="noise_mc_run").click().run()
    assert_clean(at)
    table = at.dataframe[-1].value
    low = table[table["SNR (dB)"] == "-10"]
    assert (low["re-norm. first order"] == "outside validity").all()
    assert (low["re-norm. second order"] == "outside validity").all()
    # no "+579.5 %" error against the Monte Carlo where the prediction itself is outside its validity
    assert (low["second order vs MC"] == "outside validity").all()
    assert (low["first order vs MC"] == "outside validity").all()
    assert low["second order valid"].str.startswith("no").all()
    top = table[(table["probe"] == "direction 1") & (table["SNR (dB)"] == "40")].iloc[0]
    assert top["second order valid"] == "yes" and abs(float(top["second order vs MC"].rstrip("%"))) < 10
    assert top["first order valid"].startswith("no")  # rank 1: the first order misses the σ⁴ term
    spec = charts(at)[0]
    for trace in spec["data"]:
        if "1st order" in trace["name"] or "2nd order" in trace["name"]:
            assert trace["y"][0] is None  # −10 dB: no line outside the range
            assert "valid" in trace["name"]


def test_recall_curve_runs_only_after_its_button(monkeypatch, recall_dir, caches_only_in_script_runs):
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(recall_dir))
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page(PAGE).run()
    assert_clean(at)
    assert len(charts(at)) == 1  # the retrieval-error plot only: no recall run on page visit
    at.number_input(key="w:recall_eval").set_value(16).run()
    at.number_input(key="w:snr_lo").set_value(30).run()
    at.button(key="recall_noise_run").click().run()
    assert_clean(at)
    assert at.session_state["bgjob:recall_noise"].state == "done"
    specs = charts(at)
    assert len(specs) == 2 and "recall accuracy" in specs[1]["layout"]["yaxis"]["title"]["text"]
    assert any("points done" in t for t in progress_texts(at))


def stop_during_the_second_call(monkeypatch, module, name: str) -> list:
    """`module.name` (a step's core call) presses Stop as its second call starts, as a real browser's click would:
    the first step is stored, the second ends inside (the core checks the token); the list records every call."""
    real, calls = getattr(module, name), []

    def stopping(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            job_runner.this_job().stop()
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, stopping)
    return calls


def test_stop_ends_the_monte_carlo_in_one_sentence_and_a_second_click_finishes_it(monkeypatch, rank_one_dir):
    from analysis.inspect import noise_report
    calls = stop_during_the_second_call(monkeypatch, noise_report, "monte_carlo")
    at = open_noise(monkeypatch, rank_one_dir)
    at.selectbox(key="w:mc_samples").set_value(64).run()  # settings no other test runs: nothing stored yet
    steps = int(re.match(r"(\d+) steps:", [c.value for c in at.caption if " steps: each probe" in c.value][0])[1])
    at.button(key="noise_mc_run").click().run()
    assert_clean(at)
    assert at.session_state["bgjob:noise_mc"].state == "stopped" and len(calls) == 2
    assert [i.value for i in at.info if "stopped" in i.value] == [
        f"Monte Carlo stopped after 1 of {steps} steps; press **Run Monte Carlo** to finish it (the finished ones "
        "are kept)."]
    assert not markers(charts(at)[0]) and at.button(key="noise_mc_run").label == "Run Monte Carlo"
    assert at.button(key="noise_mc:stop").disabled  # nothing runs: Stop is off
    at.selectbox(key="w:sel_head").set_value(1).run()  # the page keeps working
    assert_clean(at)
    at.selectbox(key="w:sel_head").set_value(0).run()
    at.button(key="noise_mc_run").click().run()  # resumes: only the steps not stored yet run
    assert_clean(at)
    assert at.session_state["bgjob:noise_mc"].state == "done" and len(calls) == 1 + steps  # the stored one not again
    assert markers(charts(at)[0]) and at.button(key="noise_mc_run").label == "Run again (cached)"


def test_stop_ends_the_recall_curve_in_one_sentence_and_a_second_click_finishes_it(monkeypatch, recall_dir):
    from ui.shared import cache
    calls = stop_during_the_second_call(monkeypatch, cache, "recall_accuracy_at")
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(recall_dir))
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.switch_page(PAGE).run()
    at.number_input(key="w:recall_eval").set_value(32).run()  # settings no other test runs: nothing stored yet
    at.number_input(key="w:snr_lo").set_value(30).run()  # clean, 30, 35 and 40 dB: 4 points
    at.button(key="recall_noise_run").click().run()
    assert_clean(at)
    assert at.session_state["bgjob:recall_noise"].state == "stopped" and len(calls) == 2
    assert [i.value for i in at.info if "stopped" in i.value] == [
        "Recall stopped after 1 of 4 points; press **Run recall vs SNR** to finish it (the finished ones are kept)."]
    assert len(charts(at)) == 1 and at.button(key="recall_noise_run").label == "Run recall vs SNR"
    at.button(key="recall_noise_run").click().run()
    assert_clean(at)
    assert at.session_state["bgjob:recall_noise"].state == "done" and len(calls) == 2 + 3
    assert len(charts(at)) == 2 and any("4 of 4 points done" in t for t in progress_texts(at))
