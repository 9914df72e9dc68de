"""What the browser benchmarks share: a fresh dashboard server on one sample and one headless Debian chromium page
on one of its pages (as the browser tests run it: CPU, one intra-op thread), the host's load, and the spread of
a list of times."""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from browser_utils import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, idle, open_page, streamlit_server  # noqa: E402


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


@contextmanager
def dashboard_page(sample: str, page_name: str):
    """A Playwright page on `page_name` of a fresh dashboard serving sample_models/`sample`; closed on exit."""
    from playwright.sync_api import sync_playwright
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(ROOT / "sample_models" / sample), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp, streamlit_server(env, Path(tmp) / "server.log") as url, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(url, timeout=TIMEOUT_MS)
            idle(page)
            open_page(page, page_name)
            yield page
        finally:
            browser.close()


def load_words() -> str:
    """The host's load average now, in words (a busy host slows every step alike)."""
    load = os.getloadavg()
    return f"load average before: {load[0]:.1f} (1 min), {load[1]:.1f} (5 min) on {os.cpu_count()} cores"


def print_spread(what: str, xs: list[float]) -> None:
    print(f"{what}: median {statistics.median(xs):.2f} s, p20–p80 {quantile(xs, 0.2):.2f}–{quantile(xs, 0.8):.2f} "
          f"s, min–max {min(xs):.2f}–{max(xs):.2f} s")
