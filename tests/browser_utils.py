"""Shared pieces of the real-browser tests: constants, a free port, and a `streamlit run` subprocess."""
import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
PAGES = [("Model", True), ("States & rank", True), ("Query noise", True), ("Channel importance", False),
         ("Prune", False), ("Sweep & latency", False)]  # (navigation label = page title, draws a chart)
TIMEOUT_MS = 240_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError("streamlit did not become healthy")


@contextlib.contextmanager
def streamlit_server(env: dict, log_path: Path):
    """`streamlit run app.py` on a free port until the block ends; yields the base URL."""
    port = free_port()
    log = open(log_path, "w+")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--server.fileWatcherType", "none"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.seek(0)
        tail = log.read()[-3000:]
        log.close()
        if "Traceback" in tail:
            print("streamlit log tail:\n" + tail)
