"""Issue 23.3 in the dashboard: "Export report" on the Model page builds the offline HTML through the core as a
job (its thread calls no Streamlit cache) and offers it as a download, measured on the sidebar's text."""
import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from analysis.runs import html_report
from helpers.app import APP

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_export_report_is_a_job_and_offers_the_html(monkeypatch, lm_dir, caches_only_in_script_runs):
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(lm_dir))
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["tokens"], at.session_state["sequences"] = 48, 2
    at.run()
    assert not at.exception and not at.error
    assert [b.proto.label for b in at.get("download_button")] == []
    at.button(key="report_export").click().run()   # the page follows the job to its end, then reruns
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = at.session_state["bgjob:report"]
    assert job.state == "done" and caches_only_in_script_runs == []
    [button] = [b for b in at.get("download_button") if b.proto.label.startswith("Download the report")]
    page = job.result.decode("utf-8")
    assert html_report.STAMP in page and 'id="rank-grid"' in page
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    assert (data["inputs"]["tokens"], data["inputs"]["sequences"]) == (48, 2)  # the sidebar's sizes
    assert data["inputs"]["device"] == "cpu" and data["model"]["layers"] == 2
