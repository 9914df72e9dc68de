"""The dashboard on Ray (issue 42, item 1): a server started with a cluster address (STATE_RANK_RAY_ADDRESS, set by
`make run RAY_ADDRESS=...` and the launcher's --ray-address) submits its multi-point jobs' points to Ray, says so,
and draws the same numbers as in-process. One local Ray, started by the test ("local": this machine's cores)."""
import math

import pytest

from analysis.errors import AnalysisError
from analysis.io import point_cache, ray_executor
from helpers.app import click, sensitivity_map, sensitivity_page
from ui.shared import cluster
from ui.shared.launch import ray_address


@pytest.fixture
def server_setting(monkeypatch):
    """Set the server's setting for one test; the helper reads it once, so its memory is cleared around the test."""
    def use(value: str | None):
        if value is None:
            monkeypatch.delenv(cluster.ENV, raising=False)
        else:
            monkeypatch.setenv(cluster.ENV, value)
        cluster.executor.cache_clear()
    yield use
    cluster.executor.cache_clear()


def test_the_setting_is_read_once_and_labelled(server_setting, monkeypatch):
    server_setting(None)
    assert not cluster.executor().on_ray and cluster.where() == "points run in this server"
    server_setting("10.0.0.5:6379")
    chosen = cluster.executor()
    assert chosen.on_ray and chosen.address == "10.0.0.5:6379"
    assert cluster.where() == "points run on Ray at 10.0.0.5:6379"
    monkeypatch.setenv(cluster.ENV, "")  # read once per server: a later change of the environment is not seen
    assert cluster.executor() is chosen
    assert not cluster.for_task(object()).on_ray  # a recall model's Verify stays in-process
    server_setting("local")
    assert cluster.executor().address is None and "local Ray" in cluster.where()


def test_the_launcher_takes_its_flag_out_and_refuses_a_bad_address_in_one_sentence():
    assert ray_address(["--server.port", "8600", "--ray-address", "head:6379"]) == ("head:6379",
                                                                                    ["--server.port", "8600"])
    assert ray_address(["--ray-address=local"]) == ("local", [])
    assert ray_address(["--server.port", "8600"]) == (None, ["--server.port", "8600"])
    with pytest.raises(AnalysisError, match="is not host:port"):
        ray_address(["--ray-address", "head"])


@pytest.fixture(scope="module")
def local_ray():
    ray = ray_executor.connect()  # what Executor("ray") joins: a local Ray with this machine's cores
    yield ray
    ray.shutdown()
    ray_executor._started.clear()


@pytest.mark.ray
def test_the_prune_pages_map_runs_on_ray_with_the_numbers_of_in_process(local_ray, server_setting, monkeypatch,
                                                                        lm_dir, tmp_path):
    import analysis.io.points as points
    sent, real = [], points._on_ray

    def recorded(ray, compute, pts, todo, *rest):
        sent.extend(todo)  # the points this job submitted as Ray tasks
        return real(ray, compute, pts, todo, *rest)
    monkeypatch.setattr(points, "_on_ray", recorded)
    maps, tasks = {}, {}
    for setting in (None, "local"):
        sent.clear()
        server_setting(setting)
        monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / str(setting))  # each computes its own points
        at = sensitivity_page(monkeypatch, lm_dir)
        click(at, "sensitivity:run")
        assert at.session_state["bgjob:sensitivity"].state == "done"
        maps[setting], tasks[setting] = sensitivity_map(at), len(sent)
        captions = " ".join(c.value for c in at.caption)
        sidebar = " ".join(c.value for c in at.sidebar.caption)
        if setting is None:
            assert "points run in this server" in captions and "Multi-point jobs" not in sidebar
        else:
            assert "points run on a local Ray" in captions and "points run on a local Ray" in sidebar
    assert tasks[None] == 0 and tasks["local"] > 1  # in-process: no task; on Ray: every map cell (and unpruned)
    here, remote = maps[None], maps["local"]
    assert len(here) == len(remote) and all(v is not None for row in remote for v in row)
    assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) for r, s in zip(here, remote) for a, b in zip(r, s))
    assert len(list((tmp_path / "local").glob("*.json"))) == len(list((tmp_path / "None").glob("*.json"))) > 1


def test_a_cluster_that_cannot_be_reached_is_the_jobs_one_sentence_and_the_page_keeps_working(server_setting,
                                                                                                monkeypatch, lm_dir,
                                                                                                tmp_path):
    server_setting("127.0.0.1:9")
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    at = sensitivity_page(monkeypatch, lm_dir)
    at.button(key="sensitivity:run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = [e.value for e in at.error]
    assert "Cannot reach the Ray cluster at 127.0.0.1:9" in error and "\n" not in error
    assert not (tmp_path / "cache").exists()
