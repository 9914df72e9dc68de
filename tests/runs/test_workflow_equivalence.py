"""One workflow per action: the CLI and the dashboard's job give the same JSON for the same inputs.

Issue 20, item 2: the sensitivity map (`analysis.shrink.sensitivity.compute_map`), allocate-and-choose
(`analysis.shrink.allocate.allocate_and_choose`, the CLI's `prune --allocate` and the page's "Verify and choose") and a
sweep point (`analysis.runs.sweep.sweep`) each run once through `analysis.cli.main.main([... '--json', path])` and once
through the page's background job under AppTest (same inputs, click, the click's run waits for the job), on the
bundled deltanet-small at tiny settings. Each side has its own point cache, so neither is served the other's
numbers.

Tolerance: both sides run the same float32 code on the same machine with the same single torch thread (the job's
worker thread shares the process-wide thread setting), so the numbers are expected to agree bitwise; they are
compared within relative 1e-6 (float32 carries ~7 digits), which still fails on any difference in data, model,
plan or calibration, and leaves room for a reduction order that a different thread split could change.
Labels (dataset, split, tokens, context, device, dtype, calibration, measure) must be equal as text.
Prune-and-measure and recover-and-measure (analysis/shrink/prune_workflow.py) are compared the same way, within relative
1e-5 (see PRUNE_REL below).
"""
import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from analysis.cli.main import main
from analysis.data.corpus import dataset_label
from analysis.io import point_cache
from analysis.models.load import SAMPLES_DIR
from helpers.numbers import same  # floats within 1e-6 relative (its default) unless a call says otherwise

pytestmark = pytest.mark.usefixtures("one_torch_thread")

APP = str(Path(__file__).resolve().parents[2] / "app.py")
SAMPLE = SAMPLES_DIR / "deltanet-small"
CALIB = {"calib_sequences": 2, "calib_tokens": 64, "calib_seed": 0}
STRATEGY = "wanda"                 # reads calibration data, so the calibration path and label are compared too
MAP_RATIOS, MAP_TOKENS = "0.25,0.75", 512   # 2 validation windows of 256 per point: a paired SE exists
SWEEP = {"ratio": "0.5", "context": 128, "tokens": 256}
PLAN = (0.875, 0.5, 0.25, 0.375)  # the by-eye plan of issue 29 (0.375: between the map's ratios)


def ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def click(at, key: str) -> None:
    at.button(key=key).click().run()  # the run follows the job until it settles, then reruns
    ok(at)


def page(monkeypatch, name: str, state: dict) -> AppTest:
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(SAMPLE))
    at = AppTest.from_file(APP, default_timeout=240)
    for key, value in {**CALIB, **state}.items():
        at.session_state[key] = value
    at.run()
    at.switch_page(name).run()
    ok(at)
    return at


def cli(*args) -> dict:
    out = Path(args[-1])
    assert main([*args[:-1], "--device", "cpu", "--calib-sequences", str(CALIB["calib_sequences"]),
                 "--calib-tokens", str(CALIB["calib_tokens"]), "--seed", str(CALIB["calib_seed"]),
                 "--json", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def shrink_runs(tmp_path_factory):
    """The map and allocate-and-choose, through the CLI and through the Prune page (each with its own cache)."""
    tmp = tmp_path_factory.mktemp("workflows")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(point_cache, "CACHE_DIR", tmp / "cli-cache")
        cli_map = cli("sensitivity", str(SAMPLE), "--strategy", STRATEGY, "--ratios", MAP_RATIOS,
                      "--eval-tokens", str(MAP_TOKENS), tmp / "map.json")

        mp.setattr(point_cache, "CACHE_DIR", tmp / "page-cache")
        at = page(mp, "pages/prune.py", {"prune_strategy": STRATEGY, "sens_ratios": MAP_RATIOS.replace(",", ", "),
                                         "sens_eval_tokens": MAP_TOKENS, "eval_context": 64, "eval_tokens": 256})
        click(at, "sensitivity:run")
        page_map = json.loads(json.dumps(at.session_state["sensitivity_current"]["map"]))  # what Download offers
        at.radio(key="w:prune_mode").set_value("Per layer").run()
        for layer, rho in enumerate(PLAN):  # a plan typed by eye: its prediction, as the CLI's `plan` gives it
            at.number_input(key=f"w:layer_ratio_{layer}").set_value(rho)
        at.run()
        ok(at)
        page_plan = json.loads(json.dumps(at.session_state["plan_prediction"]["prediction"]))
        page_plan_text = next(c.value for c in at.caption if c.value.startswith("Your plan: "))
        at.number_input(key="w:suggest_target").set_value(0.5).run()
        click(at, "allocate")
        page_ratios = [at.number_input(key=f"w:layer_ratio_{i}").value for i in range(len(PLAN))]
        click(at, "sens_verify")  # your plan (here the allocated one) beside the others, at its state bytes
        page_alloc = json.loads(json.dumps(at.session_state["sensitivity_check"]["report"]))  # Download allocation
        assert any(b.proto.label == "Download allocation (JSON)" for b in at.get("download_button"))

        mp.setattr(point_cache, "CACHE_DIR", tmp / "cli-cache")
        cli_plan = cli("plan", str(SAMPLE), "--strategy", STRATEGY, "--ratios", ",".join(map(str, PLAN)),
                       "--map", str(tmp / "map.json"), tmp / "plan.json")
        words = io.StringIO()
        with contextlib.redirect_stdout(words):
            assert main(["plan", str(SAMPLE), "--strategy", STRATEGY, "--ratios", ",".join(map(str, PLAN)),
                         "--device", "cpu", "--map", str(tmp / "map.json")]) == 0
        cli_plan_text = next(line for line in words.getvalue().splitlines() if line.startswith("predicted "))
        # no --map: the CLI measures (here: reads from its cache) the map with the same settings, then measures the
        # page's plan beside the allocator's, uniform and rank-suggested at its state bytes, as Verify did
        cli_prune = cli("prune", str(SAMPLE), "--strategy", STRATEGY, "--allocate", "sensitivity",
                        "--ratios", ",".join(map(str, page_ratios)), "--map-ratios", MAP_RATIOS,
                        "--map-eval-tokens", str(MAP_TOKENS), "--eval-tokens", "256", "--out", str(tmp / "pruned"),
                        tmp / "prune.json")
    return {"cli_map": cli_map, "cli_alloc": cli_prune["allocation"], "page_map": page_map, "page_alloc": page_alloc,
            "cli_plan": cli_plan, "page_plan": page_plan, "cli_plan_text": cli_plan_text,
            "page_plan_text": page_plan_text}


def test_the_sensitivity_map_is_the_same_from_the_cli_and_the_page(shrink_runs):
    cli_map, page_map = shrink_runs["cli_map"], shrink_runs["page_map"]
    assert page_map["complete"] and len(page_map["points"]) == 2 * len(page_map["layers"])
    # the CLI adds the load metadata (source, parameters, …) around the map; every field of the map is the same
    same({k: cli_map[k] for k in page_map}, page_map, "map")
    assert page_map["measure"] == f"perplexity, {dataset_label('validation')}, first {MAP_TOKENS} tokens, context 256"
    assert page_map["device"] == "cpu" and page_map["dtype"] == "float32"
    assert page_map["settings"]["calib_sequences"] == CALIB["calib_sequences"]
    assert all("se" in p for p in page_map["points"])  # two windows per point: the paired SE is there, and equal


def test_a_plan_is_predicted_the_same_by_the_cli_and_the_page(shrink_runs):
    """Issue 29: `analysis plan` and the Prune page give the same prediction (JSON and the sentence shown)."""
    page_plan, cli_plan = shrink_runs["page_plan"], shrink_runs["cli_plan"]
    same({k: cli_plan[k] for k in page_plan}, page_plan, "plan")
    assert page_plan["head_k_dims"] == [math.floor(64 * (1 - r) + 1e-9) for r in PLAN]
    assert page_plan["predicted_delta_nats"] is not None and page_plan["predicted_uncertainty_nats"] > 0
    assert shrink_runs["page_plan_text"].startswith(f"Your plan: {shrink_runs['cli_plan_text']}.")


def test_allocate_and_choose_is_the_same_from_the_cli_and_the_page(shrink_runs):
    cli_alloc, page_alloc = shrink_runs["cli_alloc"], shrink_runs["page_alloc"]
    same(cli_alloc, page_alloc, "allocation")
    choice = page_alloc["choice"]
    assert {c["name"] for c in choice["candidates"]} >= {"sensitivity-allocated", "uniform"}
    # the map's split, 4× its tokens, starting after the map's own (issue 40: choice tokens are not map tokens)
    assert choice["measure"] == (f"choice tokens: {dataset_label('validation')}, tokens {MAP_TOKENS + 1:,}–"
                                 f"{5 * MAP_TOKENS + 1:,} ({4 * MAP_TOKENS:,} scored), context 256")
    assert page_alloc["map_settings"]["eval_tokens"] == MAP_TOKENS


def test_a_sweep_point_is_the_same_from_the_cli_and_the_page(tmp_path, monkeypatch):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cli-cache")
    cli_run = cli("sweep", str(SAMPLE), "--strategies", STRATEGY, "--ratios", SWEEP["ratio"],
                  "--context", str(SWEEP["context"]), "--eval-tokens", str(SWEEP["tokens"]), "--no-latency",
                  tmp_path / "sweep.json")
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "page-cache")
    at = page(monkeypatch, "pages/sweep.py", {"sweep_strategies": [STRATEGY], "sweep_ratios": SWEEP["ratio"],
                                              "eval_context": SWEEP["context"], "eval_tokens": SWEEP["tokens"],
                                              "sweep_latency": False})
    click(at, "sweep:run")
    [page_points] = list(at.session_state["sweep_results"].values())  # what Download JSON offers as "results"
    drop = lambda p: {k: v for k, v in p.items() if k != "cached"}  # noqa: E731  (where it came from, not what)
    cli_points = [drop(p) for p in cli_run["results"]]
    page_points = [drop(p) for p in json.loads(json.dumps(page_points, default=str))]
    assert not any(p["cached"] for p in cli_run["results"])
    assert [(p["strategy"], p["ratio"]) for p in page_points] == [("unpruned", 0.0), (STRATEGY, 0.5)]
    same(cli_points, page_points, "sweep")
    point = page_points[1]
    assert (point["split"], point["context"], point["tokens"], point["device"], point["dtype"]) == \
        ("test", SWEEP["context"], SWEEP["tokens"], "cpu", "float32")
    assert point["dataset"] == dataset_label("test")
    assert point["calibration"] == (f"{CALIB['calib_sequences']}×{CALIB['calib_tokens']} tokens of the Shakespeare "
                                    "train split")
    at.switch_page("pages/prune.py").run()  # issue 29: the session's sweep points are on the history of plans
    ok(at)
    [history] = [d.value for d in at.dataframe if "Pareto front" in d.value.columns]
    assert list(history.index) == [f"sweep 1: {STRATEGY} ρ 0.5"] and history["dk'"].tolist() == ["32 32 32 32"]
    assert history["perplexity change (%)"].tolist() == pytest.approx([100 * point["delta_vs_unpruned"]])
    assert history["Δ log perplexity (nats/token)"].tolist() == pytest.approx([math.log1p(point["delta_vs_unpruned"])])


# Prune-and-measure and recover-and-measure (analysis/shrink/prune_workflow.py): a wanda prune at ratio 0.5, measured on
# 256 test tokens at context 128 (not the default 256, so a path that ignored the setting would differ), then 2
# lora-kd recovery steps. Tolerance: relative 1e-5. Both sides run the same float32 ops in the same order on one
# torch thread, so bitwise agreement is expected for the prune; the recovery's AdamW steps and the KD loss can
# amplify a last-bit difference of a reduction a little, so 1e-5 (~100 float32 ulps) leaves room for that while any
# change of data, context, plan, seed or calibration moves these numbers by 1e-3 or more.
PRUNE_REL = 1e-5
EVAL = {"context": 128, "tokens": 256}
RECOVERY = {"steps": 2, "batch": 2, "seq": 32, "rank": 8, "eval_every": 2}


def plain(value):
    return json.loads(json.dumps(value, default=str))  # what the page's Download / saved metadata carry


@pytest.fixture(scope="module")
def prune_runs(tmp_path_factory):
    """A prune with recovery through the CLI, and the same prune and recovery through the Prune page's jobs."""
    tmp = tmp_path_factory.mktemp("prune-workflows")
    cli_run = cli("prune", str(SAMPLE), "--strategy", STRATEGY, "--ratio", "0.5",
                  "--eval-context", str(EVAL["context"]), "--eval-tokens", str(EVAL["tokens"]),
                  "--recover-steps", str(RECOVERY["steps"]), "--recover-method", "lora-kd",
                  "--recover-batch", str(RECOVERY["batch"]), "--recover-seq-len", str(RECOVERY["seq"]),
                  "--recover-rank", str(RECOVERY["rank"]), "--recover-eval-every", str(RECOVERY["eval_every"]),
                  "--out", str(tmp / "pruned"), tmp / "prune.json")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp / "page-output"))
        at = page(mp, "pages/prune.py", {
            "prune_strategy": STRATEGY, "prune_ratio": 0.5, "eval_context": EVAL["context"],
            "eval_tokens": EVAL["tokens"], "prune_latency": False, "recover_method": "lora-kd",
            "recover_steps": RECOVERY["steps"], "recover_batch": RECOVERY["batch"], "recover_seq": RECOVERY["seq"],
            "recover_rank": RECOVERY["rank"], "recover_eval_every": RECOVERY["eval_every"]})
        click(at, "prune_run")
        run = at.session_state["pruned"]
        click(at, "recover_run")
        page_run = {"dims": list(run["result"].dims), "calibration": run["calib"], "before": plain(run["before"]),
                    "after": plain(run["after"]), "recovered": plain(at.session_state["pruned"]["recovered"])}
    return {"cli": cli_run, "page": page_run}


def test_prune_is_the_same_from_the_cli_and_the_page(prune_runs):
    cli_run, page_run = prune_runs["cli"], prune_runs["page"]
    assert cli_run["head_k_dims"] == page_run["dims"] == [32, 32, 32, 32]
    assert cli_run["calibration"] == page_run["calibration"]
    same(cli_run["measured_before"], page_run["before"], "before", PRUNE_REL)
    same(cli_run["measured_after"], page_run["after"], "after", PRUNE_REL)
    for side in (cli_run["measured_before"], cli_run["measured_after"], page_run["before"], page_run["after"]):
        ppl = side["perplexity"]
        assert (ppl["split"], ppl["context"], ppl["tokens"], ppl["device"], ppl["dtype"]) == \
            ("test", EVAL["context"], EVAL["tokens"], "cpu", "float32")
        assert ppl["dataset"] == dataset_label("test") and "kernel" not in side  # kernel timing was off on both
    # the long-standing CLI keys are the same numbers
    assert cli_run["perplexity_before"] == cli_run["measured_before"]["perplexity"]
    assert cli_run["perplexity_after"] == cli_run["measured_after"]["perplexity"]
    assert page_run["after"]["perplexity"]["perplexity"] != page_run["before"]["perplexity"]["perplexity"]


def test_recovery_is_the_same_from_the_cli_and_the_page(prune_runs):
    cli_run, page_rec = prune_runs["cli"], prune_runs["page"]["recovered"]
    same(cli_run["measured_recovered"], page_rec["measure"], "recovered", PRUNE_REL)
    same(cli_run["recovery"], page_rec["recovery"], "recovery", PRUNE_REL)  # settings, kept step, validation
    rec = cli_run["recovery"]
    assert (rec["method"], rec["steps"], rec["batch"], rec["seq_len"], rec["rank"]) == \
        ("lora-kd", RECOVERY["steps"], RECOVERY["batch"], RECOVERY["seq"], RECOVERY["rank"])
    ppl = page_rec["measure"]["perplexity"]
    assert (ppl["split"], ppl["context"], ppl["tokens"]) == ("test", EVAL["context"], EVAL["tokens"])
    assert ppl["perplexity"] != prune_runs["page"]["after"]["perplexity"]["perplexity"]  # the steps did train


def test_a_recall_model_is_pruned_the_same_from_the_cli_and_the_page(tmp_path, monkeypatch):
    """The CLI prunes a recall model (as the page does) and measures recall accuracy on the same pair counts and
    sequences; the saved copy carries its task, so it loads as a recall model."""
    from analysis.data.inputs import recall_task
    recall = SAMPLES_DIR / "deltanet-recall"
    cli_run = cli("prune", str(recall), "--strategy", "l1", "--ratio", "0.5", "--recall-sequences", "8",
                  "--out", str(tmp_path / "pruned"), tmp_path / "prune.json")
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(recall))
    at = AppTest.from_file(APP, default_timeout=240)
    for key, value in {"prune_strategy": "l1", "prune_ratio": 0.5, "recall_sequences_eval": 8,
                       "prune_latency": False}.items():
        at.session_state[key] = value
    at.run()
    at.switch_page("pages/prune.py").run()
    ok(at)
    click(at, "prune_run")
    run = at.session_state["pruned"]
    assert cli_run["head_k_dims"] == list(run["result"].dims)
    same(cli_run["measured_before"], plain(run["before"]), "before", PRUNE_REL)
    same(cli_run["measured_after"], plain(run["after"]), "after", PRUNE_REL)
    by_pairs = cli_run["measured_after"]["recall"]["by_pairs"]
    assert [r["pairs"] for r in by_pairs] == [4, 8, 16, 32] and cli_run["measured_after"]["recall"][
        "sequences_per_point"] == 8
    assert "perplexity_before" not in cli_run  # no text was scored
    assert recall_task(tmp_path / "pruned") is not None
