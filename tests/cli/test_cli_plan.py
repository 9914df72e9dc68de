"""`python -m analysis plan`: a plan's predicted loss from the shipped (or a given) sensitivity map, in JSON and
in words; a missing or mismatched map is one sentence. (Issue 29, item 1.)"""
import json

import pytest

from analysis.cli.main import main
from analysis.shrink import predict
from analysis.shrink.sensitivity import shipped_map_path

SAMPLE = "gated-deltanet-small"


def run(argv, capsys):
    code = main([*argv, "--device", "cpu"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_json_is_the_prediction_from_the_shipped_map(capsys):
    code, out, _ = run(["plan", SAMPLE, "--ratios", "0.875,0.5,0.25,0.375", "--json", "-"], capsys)
    assert code == 0
    got = json.loads(out)
    smap = json.loads(shipped_map_path(SAMPLE, "l1").read_text())
    want = predict.predict(smap, [8, 32, 48, 40])
    for key in ("predicted_delta_nats", "predicted_uncertainty_nats", "state_bytes", "kernel_tiles"):
        assert got[key] == pytest.approx(want[key]), key
    assert got["state_bytes"] == 4 * 64 * 4 * (8 + 32 + 48 + 40) and got["strategy"] == "l1"
    assert got["per_layer"][3]["how"] == "interpolated" and got["outside_grid"] == []
    assert got["model"] == SAMPLE and got["device"] == "cpu"


def test_plan_in_words_names_the_interpolation_and_what_is_outside_the_grid(capsys):
    code, out, _ = run(["plan", SAMPLE, "--ratio", "0.95"], capsys)
    assert code == 0
    assert "predicted Δ log perplexity" in out and "outside the map's grid" in out and "PCHIP" in out


@pytest.mark.parametrize("argv, message", [
    (["plan", "qwen35-hybrid-small", "--ratio", "0.5", "--strategy", "random"],
     "No shipped random sensitivity map for qwen35-hybrid-small"),
    (["plan", SAMPLE, "--ratio", "0.5", "--strategy", "wanda", "--map", str(shipped_map_path(SAMPLE, "l1"))],
     "The map was measured with 'l1', not 'wanda'"),
    (["plan", SAMPLE], "Give --ratio (one ratio for all layers) or --ratios"),
    (["plan", SAMPLE, "--ratios", "0.5,0.5"], "Got 2 ratios for a model with 4 linear-attention layers"),
    (["prune", SAMPLE, "--strategy", "l1", "--allocate", "sensitivity", "--budget", "0.5", "--ratio", "0.5",
      "--out", "/tmp/never-written"], "give either --budget"),
])
def test_a_plan_without_a_usable_map_is_one_sentence(argv, message, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2 and message in err and "Traceback" not in err and err.count("\n") == 1


def test_the_clis_sweep_json_and_saved_pruning_json_place_points_on_the_history_chart(tmp_path, capsys):
    """Issue 29, item 4: `sweep --json` and `prune --out`'s pruning.json carry what places a plan on the chart."""
    from analysis.shrink import plan_points, prune_run
    tokens = ["--eval-tokens", "256"]
    code, _, _ = run(["prune", SAMPLE, "--strategy", "l1", "--ratios", "0.5,0.25,0.75,0.5", *tokens,
                      "--out", str(tmp_path / "pruned"), "--json", str(tmp_path / "prune.json")], capsys)
    assert code == 0
    report = json.loads((tmp_path / "prune.json").read_text())
    saved = plan_points.from_pruning(prune_run.read(tmp_path / "pruned"), "saved")
    before, after = report["perplexity_before"]["perplexity"], report["perplexity_after"]["perplexity"]
    assert saved["delta"] == pytest.approx(after / before - 1) and saved["head_k_dims"] == [32, 48, 16, 32]
    assert saved["state_bytes"] == 4 * 64 * 4 * 128 and saved["ratios"] == [0.5, 0.25, 0.75, 0.5]
    code, _, _ = run(["sweep", SAMPLE, "--strategies", "l1", "--ratios", "0.5", *tokens, "--no-latency",
                      "--json", str(tmp_path / "sweep.json")], capsys)
    assert code == 0
    [point] = plan_points.from_sweep(json.loads((tmp_path / "sweep.json").read_text())["results"])
    assert point["head_k_dims"] == [32] * 4 and point["state_bytes"] == 4 * 64 * 4 * 128
    assert point["measure"] == saved["measure"]  # the same test tokens: one chart, one front


def test_recommend_prints_the_pages_plan_at_the_budget(capsys):
    """Issue 40 item 5: `plan MODEL --recommend --budget B --json` is `analysis.shrink.allocate.recommend`, the plan
    the Prune page recommends: ratios (one per linear layer) and the prediction fields (Δ on held-out text)."""
    from analysis.shrink.allocate import recommend
    code, out, _ = run(["plan", SAMPLE, "--recommend", "--budget", "0.5", "--json", "-"], capsys)
    assert code == 0
    got = json.loads(out)
    want = recommend(json.loads(shipped_map_path(SAMPLE, "l1").read_text()), 0.5)
    assert got["ratios"] == pytest.approx(want["ratios"]) and len(got["ratios"]) == 4
    assert got["plan"] == want["plan"] in ("uniform", "sensitivity-allocated")
    for key in ("predicted_delta_nats", "predicted_uncertainty_nats", "state_bytes"):
        assert got[key] == pytest.approx(want[key]), key
    assert got["state_bytes"] <= got["budget"]["state_bytes"] == 4 * 64 * 4 * 4 * 32
    assert "held-out text" in got["predicts"] and "isotonic" in got["fit"]
    code, out, _ = run(["plan", SAMPLE, "--recommend", "--budget", "0.5"], capsys)
    assert code == 0 and "recommended plan at mean ratio 0.5" in out and "why:" in out


@pytest.mark.parametrize("argv", [["--recommend"], ["--recommend", "--budget", "0.5", "--ratio", "0.5"],
                                  ["--budget", "0.5", "--ratio", "0.5"]])
def test_recommend_with_the_wrong_arguments_is_one_sentence(argv, capsys):
    code, _, err = run(["plan", SAMPLE, *argv], capsys)
    assert code == 2 and "--budget" in err and "Traceback" not in err
