"""Issue 42, "a class on one server": while one session's long job runs (a sweep point with 1,000 recovery steps,
minutes of work that held the old process-wide lock for the whole point), a second session's State lab opens and
reads a new text within seconds: the job hands the compute slot over at its next step (ui.shared.scheduler).

Two browser contexts (two Streamlit sessions) on one real server; docs/serving.md quotes what this test prints."""
import os
import re
import time

import pytest

from browser_utils import (CHROMIUM, CHROMIUM_ARGS, IDLE, TIMEOUT_MS, idle, no_exception, server_process,
                           start_long_sweep)
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser

OPENS_WITHIN = 5.0   # seconds from the click on "State lab" to its state heatmap drawn (issue 42)
STARTS_WITHIN = 2.0  # seconds a page's own forward pass waits for the slot behind another session's job (issue 42)


def loaded() -> float:
    """1 on a quiet host; the load average per core above that (the same work then takes longer in proportion)."""
    return max(1.0, os.getloadavg()[0] / os.cpu_count())


@pytest.fixture
def server(tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian chromium not found (/usr/bin/chromium): install it with `make chromium`")
    model = save_tiny_lm(tmp_path / "lm")
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(model), "OMP_NUM_THREADS": "1",
           "STATE_RANK_CACHE": str(tmp_path / "cache")}
    with server_process(env, tmp_path / "server.log") as (url, proc):
        yield {"url": url, "proc": proc, "log": tmp_path / "server.log"}


def session(browser, url):
    """A page in a browser context of its own: a Streamlit session of its own."""
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    page.goto(url, timeout=TIMEOUT_MS)
    idle(page)
    return page


def lab_drawn(page) -> None:
    page.wait_for_selector(".st-key-lab_state .js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
    page.wait_for_selector(IDLE, timeout=TIMEOUT_MS)


def read_text(page, text: str, word: str) -> float:
    """Seconds from Ctrl+Enter in the State lab's text box to the page showing the new text's tokens (the strip
    around the current token holds `word`, a word only this text has) with its heatmap drawn."""
    box = page.get_by_label("Text (or edit the prepared one)")
    box.fill(text)
    start = time.perf_counter()
    box.press("Control+Enter")
    page.wait_for_function("w => { const m = document.querySelector('mark');"
                           " return m && m.parentElement && m.parentElement.innerText.includes(w); }",
                           arg=word, timeout=TIMEOUT_MS)
    lab_drawn(page)
    took = time.perf_counter() - start
    idle(page)
    no_exception(page)
    return took


def slot_waits(log) -> list[float]:
    return [float(w) for w in re.findall(r"interactive request waited ([0-9.]+) s for the compute slot behind a "
                                         r"long job", log.read_text())]


def test_the_state_lab_opens_within_seconds_while_another_session_runs_a_long_job(server):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            teacher = session(browser, server["url"])
            main = start_long_sweep(teacher)  # its point (1,000 recovery steps) now runs in session 1
            stop = main.get_by_role("button", name="Stop").first

            started = time.perf_counter()
            student = session(browser, server["url"])
            first_page = time.perf_counter() - started
            print(f"\nsession 2's first page: {first_page:.1f} s; slot waits so far: {slot_waits(server['log'])}")
            started = time.perf_counter()
            student.locator("[data-testid='stSidebarNavLink']", has_text="State lab").first.click()
            student.wait_for_selector("h1:has-text('State lab')", timeout=TIMEOUT_MS)
            lab_drawn(student)
            opened = time.perf_counter() - started
            no_exception(student)
            during = read_text(student, "Alice met Bob in Zanzibar. Where did Alice meet Bob? In", "Zanzibar")
            load_during = os.getloadavg()[0]
            assert stop.is_enabled() and "1 of 2 points" in main.inner_text(), \
                "the other session's sweep point ended before the State lab was measured: nothing was shared"
            waits = slot_waits(server["log"])

            stop.click()
            teacher.wait_for_selector("text=/Stopped after 1 of 2 points/", timeout=TIMEOUT_MS)
            alone = read_text(student, "The cat sat on the mat in Quebec. Where did the cat sit? On", "Quebec")
            print(f"\nTwo sessions, one server (load average {load_during:.1f} on {os.cpu_count()} cores), while "
                  f"session 1 ran a sweep point: session 2's first page {first_page:.1f} s, State lab opened in "
                  f"{opened:.1f} s, a new text read in {during:.1f} s (alone afterwards: {alone:.1f} s); its "
                  f"requests waited for the compute slot {', '.join(f'{w:.2f}' for w in waits) or 'never'} s "
                  f"behind the job")
            assert opened <= OPENS_WITHIN * loaded()
            assert waits and max(waits) <= STARTS_WITHIN * loaded(), waits
        finally:
            browser.close()
