"""One executor for every multi-point workload (issue 42, item 1): each command wired to analysis.io.points gives
the same numbers in-process and on a local 2-CPU Ray, and a point computed on one is served from the point cache on
the other. One local Ray for the whole module (its start is the slow part on 2 cores)."""
import json
import math

import pytest

from analysis.cli.main import main
from analysis.io import point_cache, ray_executor
from analysis.io.points import Executor
from analysis.models import load as models
from analysis.shrink.sensitivity import MapSettings, compute_map, sensitivity_points

pytestmark = pytest.mark.ray
RAY = Executor("ray", num_cpus=2)  # the CLI's local Ray on this 2-core machine: the same one, reused
MAP = MapSettings("l1", (0.5,), eval_tokens=64, context=32, calib_sequences=2, calib_tokens=32)
MAP_FLAGS = ["--strategy", "l1", "--ratios", "0.5", "--eval-tokens", "64", "--context", "32",
             "--calib-sequences", "2", "--calib-tokens", "32"]


@pytest.fixture(scope="module")
def local_ray():
    ray = ray_executor.connect(num_cpus=2)
    yield ray
    ray.shutdown()
    ray_executor._started.clear()


@pytest.fixture(scope="module")
def lm(lm_dir):
    model = models.load_model(str(lm_dir), "cpu")
    return model, models.load_tokenizer(model)


@pytest.fixture(scope="module")
def here_map(lm, tmp_path_factory):
    """The map computed in-process once for the module, and the cache it went to."""
    cache = tmp_path_factory.mktemp("here")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(point_cache, "CACHE_DIR", cache)
        return compute_map(*lm, MAP), cache


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _cells(smap: dict) -> dict:
    return {(p["layer"], p["ratio"]): p for p in smap["points"]}


def test_sensitivity_map_equal_on_ray_and_in_process_with_one_cache(local_ray, lm, lm_dir, here_map, tmp_path,
                                                                    monkeypatch):
    model, tok = lm
    here, here_cache = here_map

    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "ray")
    out = tmp_path / "map.json"
    assert main(["sensitivity", str(lm_dir), *MAP_FLAGS, "--executor", "ray", "--json", str(out), "--quiet"]) == 0
    remote = json.loads(out.read_text())
    assert remote["executor"] == "ray" and remote["complete"]
    assert _close(remote["baseline"], here["baseline"])
    assert _cells(remote).keys() == _cells(here).keys()
    for cell, p in _cells(remote).items():
        q = _cells(here)[cell]
        assert p["head_k_dim"] == q["head_k_dim"] and _close(p["value"], q["value"]) and _close(p["loss"], q["loss"])
        assert _close(p["se"], q["se"])

    # computed on Ray, served in-process from the same cache
    again = list(sensitivity_points(model, tok, MAP))
    assert all(p["cached"] for p in again) and len(again) == 1 + len(here["points"])
    # computed in-process, served on Ray without a task
    monkeypatch.setattr(point_cache, "CACHE_DIR", here_cache)
    served = list(sensitivity_points(model, tok, MAP, executor=RAY))
    assert all(p["cached"] for p in served)


def _verify_numbers(choice: dict) -> dict:
    """Every measured number of a Verify-and-choose report: each candidate on the choice tokens, the held-out answer."""
    held = choice["held_out"]
    numbers = {("choice", c["name"]): c["measured_value"] for c in choice["candidates"]}
    numbers["baseline"] = choice["baseline_value"]
    numbers["held chosen"], numbers["held chosen se"] = held["chosen"]["delta"], held["chosen"]["se"]
    if "uniform" in held:
        numbers["held uniform"], numbers["held uniform se"] = held["uniform"]["delta"], held["uniform"]["se"]
    return numbers


@pytest.mark.slow  # about 45 s on a loaded 2-core host (an in-process Verify, then `prune --allocate` on Ray)
def test_verify_and_choose_equal_on_ray_and_in_process_with_one_cache(local_ray, lm, lm_dir, here_map, tmp_path,
                                                                     monkeypatch):
    from analysis.shrink.allocate import allocate_and_choose
    from analysis.shrink.stretch_measure import StretchMeasure
    model, tok = lm
    smap, here_cache = here_map
    monkeypatch.setattr(point_cache, "CACHE_DIR", here_cache)
    (tmp_path / "map.json").write_text(json.dumps(smap))
    here = allocate_and_choose(model, tok, smap, {"mean_ratio": 0.5})["choice"]

    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "ray")
    out = tmp_path / "prune.json"
    assert main(["prune", str(lm_dir), "--allocate", "sensitivity", "--strategy", "l1", "--budget", "0.5", "--map",
                 str(tmp_path / "map.json"), "--executor", "ray", "--out", str(tmp_path / "pruned"),
                 "--eval-tokens", "32", "--eval-context", "32", "--json", str(out), "--quiet"]) == 0
    remote = json.loads(out.read_text())["allocation"]["choice"]
    mine, theirs = _verify_numbers(remote), _verify_numbers(here)
    assert mine.keys() == theirs.keys() and all(_close(mine[k], theirs[k]) for k in mine)
    assert remote["winner"] == here["winner"] and remote["held_out"]["recommended"] == here["held_out"]["recommended"]

    # every measurement Ray made is served in-process from the same cache: nothing is pruned or measured again
    calls = []
    monkeypatch.setattr(StretchMeasure, "_read", lambda self, got: calls.append(got))
    again = allocate_and_choose(model, tok, smap, {"mean_ratio": 0.5})["choice"]
    assert calls == [] and _verify_numbers(again) == mine


AXIS_FLAGS = ["--axis", "both", "--strategies", "l1", "--head-strategies", "norm", "--budgets", "0.5",
              "--eval-tokens", "64", "--context", "32", "--calib-sequences", "2", "--calib-tokens", "32"]


def _axis_numbers(results: list[dict]) -> dict:
    return {(p["kind"], p["strategy"], p["head_strategy"], p["budget"]):
            (p["perplexity"], p.get("delta_log_ppl", 0.0), p.get("se", 0.0)) for p in results}


def test_sweep_axis_equal_on_ray_and_in_process_with_one_cache(local_ray, lm, lm_dir, tmp_path, monkeypatch):
    from analysis.runs.budget_sweep import budget_sweep
    model, tok = lm
    from analysis.evaluate.measure import Evaluation
    from analysis.shrink.calibration import CalibrationSettings
    settings = dict(evaluation=Evaluation("test", 32, 64), calib=CalibrationSettings(2, 32))
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "here")
    here = list(budget_sweep(model, tok, "both", ["l1"], ["norm"], [0.5], **settings))

    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "ray")
    out = tmp_path / "axis.json"
    assert main(["sweep", str(lm_dir), *AXIS_FLAGS, "--executor", "ray", "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["executor"] == "ray" and not any(p["cached"] for p in report["results"])
    mine, theirs = _axis_numbers(report["results"]), _axis_numbers(here)
    assert mine.keys() == theirs.keys() and len(mine) == 4
    assert all(_close(a, b) for k in mine for a, b in zip(mine[k], theirs[k]))

    again = list(budget_sweep(model, tok, "both", ["l1"], ["norm"], [0.5], **settings))  # Ray's, served here
    assert all(p["cached"] for p in again) and _axis_numbers(again) == mine


def test_heads_measure_equal_on_ray_and_in_process_with_one_cache(local_ray, lm, lm_dir, tmp_path, monkeypatch):
    import analysis.shrink.heads.sensitivity as head_sensitivity
    from analysis.runs.head_study import measure_removal
    model, tok = lm
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "here")
    here, label = measure_removal(model, tok, 32, 4)

    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "ray")
    out = tmp_path / "heads.json"
    assert main(["heads", str(lm_dir), "--measure", "4", "--tokens", "32", "--sequences", "2", "--executor", "ray",
                 "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["executor"] == "ray" and report["removal"]["data"] == label
    for layer, row in zip(report["layers"], here):
        assert [h["removal"]["sequences"] for h in layer["heads"]] == [h["sequences"] for h in row] == [4] * len(row)
        assert all(_close(h["removal"]["delta"], r["delta"]) and _close(h["removal"]["se"], r["se"])
                   for h, r in zip(layer["heads"], row))

    def never(*_a, **_k):
        raise AssertionError("a head measured on Ray was measured again in-process")
    monkeypatch.setattr(head_sensitivity, "head_removal_point", never)
    again, _ = measure_removal(model, tok, 32, 4)  # Ray's points, served here from the cache
    assert [[h["delta"] for h in row] for row in again] == [[h["removal"]["delta"] for h in layer["heads"]]
                                                             for layer in report["layers"]]


def test_address_without_ray_is_one_sentence_on_every_command(lm_dir, tmp_path, capsys):
    prune = ["prune", str(lm_dir), "--allocate", "sensitivity", "--strategy", "l1", "--budget", "0.5",
             "--out", str(tmp_path / "never")]
    for command in (["sensitivity", str(lm_dir), *MAP_FLAGS], prune, ["sweep", str(lm_dir), *AXIS_FLAGS],
                    ["heads", str(lm_dir), "--measure", "4", "--tokens", "32"],
                    ["eval", str(lm_dir), "--tasks", "shakespeare_word_order", "--plans", str(tmp_path / "p.json")],
                    ["plan", str(lm_dir), "--recommend", "--budget", "0.5"]):
        assert main([*command, "--address", "127.0.0.1:9"]) == 2
        err = capsys.readouterr().err
        assert "add --executor ray" in err and err.count("\n") == 1


def test_unreachable_cluster_is_one_sentence_and_writes_nothing(lm_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    prune = ["prune", str(lm_dir), "--allocate", "sensitivity", "--strategy", "l1", "--budget", "0.5",
             "--out", str(tmp_path / "never")]
    for command in (["sensitivity", str(lm_dir), *MAP_FLAGS], prune, ["sweep", str(lm_dir), *AXIS_FLAGS],
                    ["heads", str(lm_dir), "--measure", "4", "--tokens", "32"],
                    ["eval", str(lm_dir), "--tasks", "shakespeare_word_order", "--plans", str(tmp_path / "p.json")],
                    ["plan", str(lm_dir), "--recommend", "--budget", "0.5"]):
        assert main([*command, "--executor", "ray", "--address", "127.0.0.1:9", "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: Cannot reach the Ray cluster at 127.0.0.1:9") and "\n" not in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "never").exists()


def test_plan_recommend_measures_a_missing_map_on_ray_equal_to_in_process_with_one_cache(local_ray, lm, lm_dir,
                                                                                         here_map, tmp_path,
                                                                                         monkeypatch):
    import analysis.io.points as points
    from analysis.shrink.allocate import recommend
    model, tok = lm
    smap, here_cache = here_map
    here = recommend(smap, 0.5)
    flags = ["plan", str(lm_dir), "--recommend", "--budget", "0.5", "--map-ratios", "0.5", "--map-eval-tokens", "64",
             "--map-context", "32", "--calib-sequences", "2", "--calib-tokens", "32", "--quiet"]

    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "ray")
    out = tmp_path / "rec.json"
    assert main([*flags, "--executor", "ray", "--json", str(out)]) == 0  # no shipped map: measured on Ray
    remote = json.loads(out.read_text())
    assert remote["executor"] == "ray" and remote["map_source"] == "measured (ray)"
    assert remote["head_k_dims"] == here["head_k_dims"] and remote["plan"] == here["plan"]
    assert _close(remote["predicted_loss"], here["predicted_loss"])
    assert _close(remote["predicted_uncertainty"], here["predicted_uncertainty"])
    assert all(p["cached"] for p in sensitivity_points(model, tok, MAP))  # Ray's map points, served here

    def no_task(*_a, **_k):
        raise AssertionError("a map point computed in-process was computed again on Ray")
    monkeypatch.setattr(point_cache, "CACHE_DIR", here_cache)
    monkeypatch.setattr(points, "_on_ray", no_task)
    assert main([*flags, "--executor", "ray", "--json", str(out)]) == 0  # the in-process map, served on Ray
    assert _close(json.loads(out.read_text())["predicted_loss"], here["predicted_loss"])


def test_eval_plans_equal_on_ray_and_in_process_with_one_cache(local_ray, lm, lm_dir, tmp_path, monkeypatch):
    from analysis.evaluate.harness import TaskSettings
    from analysis.runs.plan_eval import eval_plans
    model, tok = lm
    plans = [{"name": "half", "head_k_dims": [16, 16]}, {"name": "lopsided", "head_k_dims": [24, 8]}]
    (tmp_path / "plans.json").write_text(json.dumps([plans[0], plans[1]["head_k_dims"]]))
    tasks = TaskSettings(("shakespeare_word_order",), limit=4, batch_size=8)
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "here")
    here = {tuple(r["head_k_dims"]): r for _, r in eval_plans(model, tok, tasks, plans)}

    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "ray")
    out = tmp_path / "eval.json"
    assert main(["eval", str(lm_dir), "--tasks", "shakespeare_word_order", "--limit", "4", "--batch-size", "8",
                 "--plans", str(tmp_path / "plans.json"), "--executor", "ray", "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["executor"] == "ray" and not any(r["cached"] for r in report["plans"])
    assert [r["name"] for r in report["plans"]] == ["unpruned", "half", "plan 2"]
    for r in report["plans"]:
        mine, theirs = r["tasks"]["shakespeare_word_order"], here[tuple(r["head_k_dims"])]["tasks"][
            "shakespeare_word_order"]
        assert mine["docs"] == theirs["docs"] == 4 and mine["metrics"].keys() == theirs["metrics"].keys()
        assert all(_close(m["value"], theirs["metrics"][k]["value"]) for k, m in mine["metrics"].items())

    again = list(eval_plans(model, tok, tasks, plans))  # Ray's plans, served here from the cache
    assert [i for i, _ in again] == [0, 1, 2] and all(r["cached"] for _, r in again)
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "here")
    served = list(eval_plans(model, tok, tasks, plans, executor=RAY))  # and the in-process ones on Ray
    assert all(r["cached"] for _, r in served)


def test_a_bad_plans_file_is_one_sentence_and_nothing_is_measured(lm_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    bad = {"short.json": "[[16]]", "wide.json": "[[16, 64]]", "text.json": "not json", "empty.json": "[]",
           "words.json": '[["a", "b"]]'}
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        assert main(["eval", str(lm_dir), "--tasks", "shakespeare_word_order", "--plans", str(tmp_path / name),
                     "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and "--plans" in err, err
    assert main(["eval", str(lm_dir), "--tasks", "shakespeare_word_order", "--executor", "ray", "--quiet"]) == 2
    assert "add --plans FILE" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()
