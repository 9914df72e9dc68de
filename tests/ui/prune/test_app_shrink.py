"""The Shrink pages (Channel importance, Prune, Sweep & latency) under AppTest, on tiny random-init models."""
import pytest

import analysis.runs.sweep
from helpers.app import charts, clean, click, open_page, sweep_page, sweep_points
from ui.shared import job_runner

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only", "sweep_cache")


@pytest.mark.parametrize("page,title", [("pages/importance.py", "Channel importance"), ("pages/prune.py", "Prune"),
                                        ("pages/sweep.py", "Sweep & latency")])
def test_shrink_pages_render(monkeypatch, lm_dir, page, title):
    at = open_page(monkeypatch, lm_dir, page)
    assert at.title[0].value == title
    assert at.expander[0].label == "What am I seeing?"
    assert any("device cpu" in c.value for c in at.caption)
    if page != "pages/importance.py":  # nothing measured yet: a sentence in place of blank axes
        titles = [s["layout"]["title"]["text"] for s in charts(at)]
        assert not [t for t in titles if "kernel time" in t or "each layer alone" in t or "Perplexity vs" in t]
        infos = " ".join(i.value for i in at.info)
        assert ("No kernel timings yet" in infos and "No sweep points" in infos) if page == "pages/sweep.py" \
            else "No map for these settings yet" in infos


def test_importance_shows_scores_masks_agreement_and_energy(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/importance.py")
    specs = charts(at)
    titles = [s["layout"]["title"]["text"] for s in specs]
    assert "PCA (rotation, not axis-aligned)" in titles and "Jaccard overlap of the kept sets" in titles
    pca = specs[titles.index("PCA (rotation, not axis-aligned)")]
    assert "rotation, not axis-aligned" in pca["layout"]["xaxis"]["title"]["text"]
    mask = specs[titles.index("Kept channels, layer 0, head 0")]["data"][0]
    assert "PCA (rotation, not axis-aligned)" not in mask["y"] and len(mask["y"]) == 5  # five axis-aligned
    assert any("Calibration ready: 2×64 tokens" in s.label for s in at.status)
    assert any("2×64 tokens of the Shakespeare train split" in c.value for c in at.caption)
    # a plain line under each chart: scores, masks, agreement, and the energy of each tab
    notices = [c.value for c in at.caption if c.value.startswith("Notice")]
    assert len(notices) == 5 and any("kept by all 5" in n for n in notices), notices


def test_a_plan_that_prunes_nothing_is_refused_with_the_clis_sentence(monkeypatch, lm_dir, capsys, tmp_path):
    """Issue 43: one rule for an unchanged plan (analysis.shrink.prune_run.unchanged): the page shows the sentence
    the CLI refuses with, and Prune is off."""
    from analysis.cli.main import main
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("l1")
    at.slider(key="w:prune_ratio").set_value(0.2)
    at.selectbox(key="w:prune_round").set_value(32).run()
    assert main(["prune", str(lm_dir), "--strategy", "l1", "--ratio", "0.2", "--round-to", "32", "--out",
                 str(tmp_path / "p"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert [e.value for e in at.error] == [err.strip().removeprefix("error: ")] and "keeps every key channel" in err
    assert at.button(key="prune_run").disabled and not (tmp_path / "p").exists()


def test_uniform_prune_compares_recovers_and_offers_the_zip(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("wanda")
    at.selectbox(key="w:prune_round").set_value(16).run()
    clean(at)
    assert at.table[0].value["dk'"].tolist() == [16, 16]
    click(at, "prune_run")
    table = at.table[1].value
    assert list(table.columns) == ["before", "after pruning", "Δ after pruning", "% after pruning"]
    assert table.loc["key dim per head, by layer"].tolist()[:2] == ["32, 32", "16, 16"]
    assert any(r.startswith("perplexity (Shakespeare") and "context 64" in r for r in table.index)
    assert "Download the pruned model (.zip)" in [b.proto.label for b in at.get("download_button")]  # besides plans
    for key, value in {"w:recover_steps": 2, "w:recover_batch": 2, "w:recover_seq": 32}.items():
        at.number_input(key=key).set_value(value)
    assert at.table[0].value["dk"].tolist() == [32, 32]  # the shared model is untouched
    click(at, "recover_run")
    assert list(at.table[1].value.columns)[4:] == ["after recovery", "Δ after recovery", "% after recovery"]
    # the verdict: better (success), worse (warning) or within its noise (info), never silent
    assert at.success or at.warning or [i for i in at.info if "within noise" in i.value]


def test_bad_per_layer_ratio_shows_an_error_then_a_valid_prune_works(monkeypatch, lm_dir, tmp_path):
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("l1")
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    clean(at)
    # one rank-utilization bar per layer (the first run also shows the states collection's progress box)
    assert len([p for p in at.get("progress") if "rank utilization" in p.proto.text]) == 2
    at.number_input(key="w:layer_ratio_0").set_value(0.99).run()
    assert not at.exception
    assert [e.value for e in at.error] == ["Layer 0: ratio 0.99 leaves no key channels of 32; use a smaller ratio."]
    at.number_input(key="w:layer_ratio_0").set_value(0.25).run()
    clean(at)
    click(at, "suggest")
    ratios = [at.number_input(key=f"w:layer_ratio_{i}").value for i in range(2)]
    assert sum(ratios) / 2 == pytest.approx(0.5, abs=1e-3)
    click(at, "prune_run")
    assert at.table[1].value.loc["parameters"].tolist()[0] != at.table[1].value.loc["parameters"].tolist()[1]
    out = tmp_path / "saved"
    monkeypatch.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp_path))  # the dashboard saves by name under one root
    at.text_input(key="w:prune_out").set_value("saved")
    click(at, "prune_save")
    assert (out / "pruning.json").exists() and at.success
    at.button(key="prune_save").click().run()  # again: refused without the overwrite box
    assert [e.value for e in at.error] == [f"{out} already exists; choose a new directory or allow overwriting."]
    at.checkbox(key="prune_overwrite").check()
    click(at, "prune_save")


def test_prune_of_a_recall_model_reports_recall_accuracy_and_saves_as_one(monkeypatch, recall_dir, tmp_path):
    at = open_page(monkeypatch, recall_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("drrqr")
    at.number_input(key="w:recall_sequences_eval").set_value(8)
    click(at, "prune_run")
    rows = at.table[1].value.index.tolist()
    assert "recall accuracy, 4 pairs (8 sequences)" in rows and not any(r.startswith("perplexity") for r in rows)
    notes = " ".join(c.value for c in at.caption)  # scored by recall accuracy: no perplexity "better" note
    assert "higher recall accuracy" in notes and "lower perplexity" not in notes
    assert "dk^" not in notes and "1/√dₖ" in notes  # the readout scale as math, not "dk^-1/2"
    monkeypatch.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp_path))
    at.text_input(key="w:prune_out").set_value("pruned-recall")
    click(at, "prune_save")
    assert (tmp_path / "pruned-recall" / "training.json").exists()  # reloads as a recall model


def test_two_point_sweep_draws_both_points_and_the_baseline(monkeypatch, lm_dir):
    at = sweep_page(monkeypatch, lm_dir)
    click(at, "sweep:run")
    lines, spec = sweep_points(at)
    assert lines == {"Random": [0.5], "L1 magnitude": [0.5]}
    assert [s["y0"] for s in spec["layout"]["shapes"]]  # the unpruned baseline
    assert "context 64" in spec["layout"]["yaxis"]["title"]["text"]
    assert [b.proto.label for b in at.get("download_button")] == ["Download CSV", "Download JSON"]
    assert at.button(key="sweep:run").label == "Run again (cached)"


def test_stopped_sweep_resumes_from_the_cache(monkeypatch, lm_dir):
    real = analysis.runs.sweep.sweep
    calls = []

    def stop_after_first_pruned_point(*args, **kwargs):
        for n, point in enumerate(real(*args, **kwargs)):
            calls.append(point["cached"])
            if n == 1 and len(calls) == 2:  # the Stop click of a real browser, once, between points
                job_runner.this_job().stop()
            yield point
    monkeypatch.setattr(analysis.runs.sweep, "sweep", stop_after_first_pruned_point)
    at = sweep_page(monkeypatch, lm_dir)
    click(at, "sweep:run")
    assert sweep_points(at)[0] == {"Random": [0.5]}
    assert at.button(key="sweep:run").label == "Resume sweep"
    assert any("Stopped after 2 of 3 points" in i.value for i in at.info)
    click(at, "sweep:run")
    assert sweep_points(at)[0] == {"Random": [0.5], "L1 magnitude": [0.5]}
    assert calls == [False, False, True, True, False]  # resumed: finished points came from the disk cache


def test_bad_sweep_ratios_show_one_error_and_the_latency_section_stays(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/sweep.py")
    at.text_input(key="w:sweep_ratios").set_value("0.5, 1.5").run()
    assert not at.exception
    assert [e.value for e in at.error] == ["The pruning ratios must be at least 0 and below 1, got 1.5."]
    assert at.button(key="latency:run")
    at.text_input(key="w:sweep_ratios").set_value("0.5").run()
    clean(at)


@pytest.mark.parametrize("page", ["pages/importance.py", "pages/prune.py", "pages/sweep.py"])
def test_shrink_pages_render_for_a_recall_model(monkeypatch, recall_dir, page):
    at = open_page(monkeypatch, recall_dir, page)
    if page == "pages/importance.py":
        assert any("synthetic recall sequences" in c.value for c in at.caption)
    if page == "pages/sweep.py":
        assert "no tokenizer" in at.info[0].value


def test_latency_sweep_draws_points_with_tile_boundaries(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/sweep.py")
    at.text_input(key="w:latency_dims").set_value("16, 80")
    at.number_input(key="w:latency_batch").set_value(1)
    at.number_input(key="w:latency_tokens").set_value(64).run()
    click(at, "latency:run")
    [spec] = [s for s in charts(at) if "kernel time vs key dim" in s["layout"]["title"]["text"]]
    title = spec["layout"]["title"]["text"].replace("<br>", " ")  # long titles wrap (ui.shared.figures.wrap_title)
    assert spec["data"][0]["x"] == [16, 80] and "on CPU (float32, B1 T64" in title
    assert [s["x0"] for s in spec["layout"]["shapes"]] == [64]
    assert spec["layout"]["xaxis"]["title"]["text"] == "key dim dk per head (channels)"
    assert any("wall clock, median of 15 after 2 warm-up, 1 CPU thread" in c.value for c in at.caption)
    assert "error_y" in spec["data"][0]  # IQR bars
    table = at.table[0].value
    assert table["dk"].tolist() == [16, 80] and {"median (ms)", "IQR (ms)", "repeats"} <= set(table.columns)


def test_prune_readout_scale_is_a_labelled_choice_and_is_saved(monkeypatch, lm_dir, tmp_path):
    import json
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    assert at.radio(key="w:prune_rescale").value == "original"          # pure channel removal by default
    assert any("16 × 256 tokens by default" in c.value for c in at.caption)
    at.selectbox(key="w:prune_strategy").set_value("l1")
    at.radio(key="w:prune_rescale").set_value("default").run()
    click(at, "prune_run")
    assert any("the reference code's behaviour" in c.value and "calibration: none (data-free strategy)" in c.value
               for c in at.caption)
    monkeypatch.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp_path))  # the dashboard saves by name under one root
    at.text_input(key="w:prune_out").set_value("saved")
    click(at, "prune_save")
    assert json.loads((tmp_path / "saved" / "pruning.json").read_text())["rescale"] == "default"
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    # a uniform prune at fla's own readout scale is the family's own type, loadable without this project
    assert config.get("readout_key_dims") is None and not config["model_type"].startswith("pruned_")


def test_sweep_executor_defaults_to_in_process_and_an_unreachable_ray_is_one_sentence(monkeypatch, lm_dir, tmp_path):
    at = sweep_page(monkeypatch, lm_dir)
    assert at.selectbox(key="w:sweep_executor").value == "in-process"
    assert at.selectbox(key="w:sweep_executor").options == ["in-process", "ray"]
    assert at.text_input(key="w:sweep_address").disabled
    at.selectbox(key="w:sweep_executor").set_value("ray").run()
    at.text_input(key="w:sweep_address").set_value("127.0.0.1:9").run()
    at.button(key="sweep:run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = [e.value for e in at.error]
    assert error.startswith("Cannot reach the Ray cluster at 127.0.0.1:9") and error.count(". ") == 0
    assert not (tmp_path / "sweeps").exists()  # nothing written to the cache
