"""The job runner (ui.shared.job_runner) works without Streamlit: imported in a fresh interpreter where
`import streamlit` fails, it runs a job with progress, ends one on Stop, and turns a failure into one sentence."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = r"""
import sys, time
sys.modules["streamlit"] = None  # any `import streamlit` (or streamlit.x) now raises ImportError
from ui.shared import job_runner
from analysis.errors import AnalysisError
from analysis.runtime.cancel import check
assert not any(name == "streamlit" or name.startswith("streamlit.") for name in sys.modules if sys.modules[name])

seen = []
def counting(job):
    for i in range(4):
        job.report(i / 4, f"step {i + 1} of 4")
        seen.append((job.fraction, job.text))
    return "forty-two"
done = job_runner.Job("count", "k", "four steps")
assert job_runner.start(done, counting)
done.thread.join(10)
assert (done.state, done.result, done.fraction, done.error) == ("done", "forty-two", 1.0, None), vars(done)
assert seen == [(0.0, "step 1 of 4"), (0.25, "step 2 of 4"), (0.5, "step 3 of 4"), (0.75, "step 4 of 4")], seen

def spinning(job):
    while True:
        check(job.cancelled)
        time.sleep(0.01)
spin = job_runner.Job("spin", "k", "until stopped")
assert job_runner.start(spin, spinning)
time.sleep(0.1)
assert spin.running and job_runner.running_jobs() == [spin]
spin.stop()
spin.thread.join(5)
assert spin.state == "stopped" and spin.seconds_to_end < 1.0 and spin.error is None

def refusing(job):
    raise AnalysisError("The SNR range is empty; make the upper end at least the lower one.")
def buggy(job):
    raise ValueError("a bug.\nWith a second line. And a third sentence")
for work in (refusing, buggy):
    failed = job_runner.Job("noise check", "k", "fails")
    assert job_runner.start(failed, work)
    failed.thread.join(5)
    message = failed.error
    assert failed.state == "failed", vars(failed)
    assert message.endswith(".") and ". " not in message.rstrip(".") and "\n" not in message, message
    print(message)
assert job_runner.running_jobs() == []
print("streamlit imported:", any(sys.modules.get(n) for n in sys.modules if n.split(".")[0] == "streamlit"))
"""


def test_the_runner_runs_stops_and_reports_errors_without_streamlit():
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    refused, bug, imported = run.stdout.strip().splitlines()
    assert refused == "The SNR range is empty; make the upper end at least the lower one."
    assert bug == "The noise check stopped on an unexpected error (ValueError); the server log has the details."
    assert imported == "streamlit imported: False"
