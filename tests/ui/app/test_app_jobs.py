"""Dashboard jobs (issue 25 defect 9, issue 20 item 7): a job's thread gets plain objects and never calls a
Streamlit cache; the server caps its running jobs; a job whose session ended, or of a server that stops, ends
within about a second."""
import time

import pytest

from analysis.runtime.cancel import check
from helpers.app import click, open_page, sensitivity_map, sensitivity_page, sweep_page, sweep_points
from ui.shared import job_runner

pytestmark = pytest.mark.usefixtures("one_torch_thread", "sweep_cache")


def test_prune_job_calls_no_streamlit_cache_from_its_thread(monkeypatch, lm_dir, caches_only_in_script_runs):
    """Gradient scores: calibration, its backward pass, the prune, the cached baseline, all in the job."""
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("grad").run()
    click(at, "prune_run")
    assert at.table[1].value.columns[0] == "before"
    assert caches_only_in_script_runs == []


def test_sweep_job_calls_no_streamlit_cache_from_its_thread(monkeypatch, lm_dir, caches_only_in_script_runs):
    at = sweep_page(monkeypatch, lm_dir)
    at.multiselect(key="w:sweep_strategies").set_value(["wanda"]).run()
    click(at, "sweep:run")
    assert sweep_points(at)[0] == {"Wanda": [0.5]}


def test_sensitivity_map_is_a_job_that_calls_no_streamlit_cache_from_its_thread(monkeypatch, lm_dir,
                                                                               caches_only_in_script_runs):
    at = sensitivity_page(monkeypatch, lm_dir)
    at.selectbox(key="w:prune_strategy").set_value("wanda").run()  # needs the shared calibration
    click(at, "sensitivity:run")
    assert all(v is not None for row in sensitivity_map(at) for v in row)
    assert at.session_state["bgjob:sensitivity"].state == "done"


def test_a_busy_server_refuses_another_job_in_one_line(monkeypatch, lm_dir):
    monkeypatch.setenv(job_runner.MAX_JOBS_ENV, "1")
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    other = _spinning_job("another session's")
    try:
        at.button(key="prune_run").click().run()
    finally:
        other.stop()
        other.thread.join(5)
    assert [e.value for e in at.error] == ["The server is busy: 1 job is running; try again when one ends."]
    assert job_runner.busy_message(2) == "The server is busy: 2 jobs are running; try again when one ends."
    assert job_runner.max_jobs() == 1


def _spinning_job(session_id: str | None) -> job_runner.Job:
    """A job whose work checks its cancel token as the core's loops do, until cancelled."""
    job = job_runner.Job("test", "k", "spins until cancelled", session_id)

    def work(j):
        while True:
            check(j.cancelled)
            time.sleep(0.01)
    assert job_runner.start(job, work)
    return job


def test_a_job_stops_within_a_second_once_its_session_ended(monkeypatch):
    ended = {"gone"}
    monkeypatch.setattr(job_runner, "session_alive", job_runner.session_alive)  # restored after the test
    mine, others = _spinning_job("gone"), _spinning_job("still here")
    start = time.monotonic()
    job_runner.watch_sessions(lambda sid: sid not in ended)
    mine.thread.join(5)
    assert mine.state == "stopped" and time.monotonic() - start < 1.5
    assert others.running  # another session's job goes on
    others.stop()
    others.thread.join(5)
    assert job_runner.running_jobs() == []


def test_shutdown_stops_every_job_and_waits_for_its_thread():
    running = [_spinning_job(None), _spinning_job(None)]
    assert job_runner.shutdown(timeout=5) == 2
    assert all(j.state == "stopped" and not j.thread.is_alive() for j in running)


def test_overwrite_refuses_a_folder_another_session_saved_since_the_page_showed_it(monkeypatch, lm_dir, tmp_path):
    """Defect 11: the page showed the Save form, another session then saved the same name; Overwrite asks again
    instead of silently replacing that model, and the next press replaces it."""
    from analysis.io.model_dir import save_model
    from family_cases.text_lm import build_tiny
    monkeypatch.setenv("STATE_RANK_OUTPUT_ROOT", str(tmp_path))
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("l1").run()
    click(at, "prune_run")
    at.text_input(key="w:prune_out").set_value("shared-name")
    at.checkbox(key="prune_overwrite").check().run()
    click(at, "prune_save")  # saved: this session has seen its own save
    assert [s.value for s in at.success][-1].startswith(f"Saved to {tmp_path / 'shared-name'}")
    at.run()
    save_model(build_tiny("delta_net", seed=1), tmp_path / "shared-name", overwrite=True)  # the other session
    theirs = (tmp_path / "shared-name" / "model.safetensors").read_bytes()
    at.button(key="prune_save").click().run()
    assert [e.value for e in at.error] == [f"{tmp_path / 'shared-name'} was saved again (by another session) since "
                                           "this page showed it; press Save again to replace it."]
    assert (tmp_path / "shared-name" / "model.safetensors").read_bytes() == theirs  # untouched
    click(at, "prune_save")  # asked again: now it replaces the folder it has seen
    assert (tmp_path / "shared-name" / "model.safetensors").read_bytes() != theirs


def test_verify_and_choose_is_a_job_that_calls_no_streamlit_cache_from_its_thread(monkeypatch, lm_dir,
                                                                                  caches_only_in_script_runs):
    """Issue 20: Verify and choose ran in a callback under a spinner; now its calibration and prunes run in a job."""
    at = sensitivity_page(monkeypatch, lm_dir)
    at.selectbox(key="w:prune_strategy").set_value("wanda").run()  # needs the shared calibration
    click(at, "sensitivity:run")
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    click(at, "allocate")
    click(at, "sens_verify")
    assert at.session_state["bgjob:verify"].state == "done"
    assert any(m.value.startswith("**Chosen on the choice tokens: ") for m in at.markdown)
