"""README screenshots of every page on the real default sample (deltanet-small), incl. a prune and a sweep.

Run after `make test` has installed everything: `.venv/bin/python docs/take_screenshots.py` (a few minutes).
"""
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from browser_utils import (CHROMIUM, CHROMIUM_ARGS, PAGES, TIMEOUT_MS, full_screenshot, idle, open_page,  # noqa: E402
                           run_sweep, set_ratios, streamlit_server)

OUT = ROOT / "docs" / "screenshots"


def main():
    from playwright.sync_api import sync_playwright
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": "deltanet-small", "OMP_NUM_THREADS": "2"}
    with streamlit_server(env, Path(tempfile.mkdtemp()) / "server.log") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(url, timeout=TIMEOUT_MS)
        idle(page)
        for title, _ in PAGES[:4]:
            open_page(page, title)
            if title == "Query noise":  # the Monte Carlo runs on a click only
                page.get_by_role("button", name="Run Monte Carlo").click()
                page.wait_for_selector("button:has-text('Run again (cached)')", timeout=TIMEOUT_MS)
                idle(page)
            full_screenshot(page, OUT / f"{title.lower().replace(' & ', '_').replace(' ', '_')}.png")
        open_page(page, "Prune")
        page.get_by_role("button", name="Prune", exact=True).click()
        page.wait_for_selector("h3:has-text('Before and after')", timeout=TIMEOUT_MS)
        idle(page)
        full_screenshot(page, OUT / "prune.png")
        open_page(page, "Sweep & latency")
        set_ratios(page, "0.25, 0.5, 0.75")
        run_sweep(page)
        page.get_by_role("button", name="Time the kernel").click()
        page.wait_for_selector("button:has-text('Time again')", timeout=TIMEOUT_MS)  # a background job
        idle(page)
        full_screenshot(page, OUT / "sweep.png")
        browser.close()


if __name__ == "__main__":
    main()
