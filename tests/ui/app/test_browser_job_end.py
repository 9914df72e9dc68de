"""Issue 25 defects 9 and 10 in a real browser: Stop inside a sweep point (during its recovery steps), a closed
tab during a long prune, and SIGTERM during a job. In each the server's own CPU time (/proc/<pid>/stat) falls
to idle within a few seconds, nothing reaches the sweep cache after the click, and SIGTERM exits 0.
Issue 29: on the server's side, each job ends within a second of the stop's arrival (its own log lines say when
the stop was received and how long after it the work ended); the figures docs/dashboard.md quotes are these tests' own."""
import os
import re
import signal
import time

import pytest

from browser_utils import (CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, idle, no_exception, open_page, server_process,
                           start_long_sweep, wait_while_running)
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser

IDLE_CPU = 0.1    # cores: an idle server (its script threads poll a few times a second) stays well below
BUSY_CPU = 0.3    # cores: a job on a shared 2-core box gets at least this much (alone: about 1)
# seconds from the click (or the closed tab) to idle: the job ends within one window or recovery step, and the
# page then redraws itself once or twice (on a loaded shared 2-core box that alone can take a few seconds);
# before the fix it was 45-70 s
IDLE_WITHIN = 10.0
ENDS_WITHIN = 1.0  # seconds from the stop's arrival on the server to the end of the job's work (issue 29)


def busy_cpu() -> float:
    """BUSY_CPU on a quiet host; on a loaded one the job's thread gets its share of a core (at load average 14 on 2
    cores about 0.14), so the floor that shows the work running falls in proportion."""
    return BUSY_CPU / max(1.0, os.getloadavg()[0] / os.cpu_count())


def ends_within() -> float:
    """ENDS_WITHIN on a quiet host; on a loaded one (load average above the core count) the job's thread gets a
    share of a core, so the same work takes longer in proportion."""
    return ENDS_WITHIN * max(1.0, os.getloadavg()[0] / os.cpu_count())


def server_side_end(log, limit: float = 30.0) -> float:
    """Seconds the job took to end after its stop reached the server, read from the server's log line."""
    deadline = time.time() + limit
    while time.time() < deadline:
        found = re.search(r"job ended ([0-9.]+) s after its stop was received", log.read_text())
        if found:
            return float(found.group(1))
        time.sleep(0.2)
    raise AssertionError("the server never logged the job's end after its stop: " + log.read_text()[-1500:])


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process, all threads (psutil is not installed)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_load(pid: int, window: float = 0.5) -> float:
    before = cpu_seconds(pid)
    time.sleep(window)
    return (cpu_seconds(pid) - before) / window


def seconds_until_idle(pid: int, since: float, limit: float = 60.0, window: float = 0.5) -> float:
    """Seconds from `since` to the start of the first window in which the server used under IDLE_CPU cores."""
    while time.time() - since < limit:
        start = time.time()
        if cpu_load(pid, window) < IDLE_CPU:
            return start - since
    raise AssertionError(f"the server was still busy {limit:.0f} s after the click")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_tiny_lm(tmp_path_factory.mktemp("job-end-lm"))


@pytest.fixture
def server(tmp_path, model):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian chromium not found (/usr/bin/chromium): install it with `make chromium`")
    cache = tmp_path / "cache"
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(model), "OMP_NUM_THREADS": "1",
           "STATE_RANK_CACHE": str(cache)}
    with server_process(env, tmp_path / "server.log") as (url, proc):
        yield {"url": url, "proc": proc, "cache": cache, "log": tmp_path / "server.log"}


@pytest.fixture
def browser(server):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def new_page(browser, url):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(url, timeout=TIMEOUT_MS)
    idle(page)
    return page


def fill(field, value) -> None:
    field.fill(str(value))
    field.press("Enter")


def written_after(cache, moment: float) -> list:
    return [p.name for p in cache.glob("**/*") if p.is_file() and p.stat().st_mtime > moment] if cache.exists() else []


def start_long_prune(page) -> None:
    """Prune page, the whole test split scored at a short context: the prune's measurements take a while."""
    open_page(page, "Prune")
    main = page.locator("[data-testid='stMain']")
    main.get_by_text("Evaluation settings (test split; kernel timing)").click()
    fill(main.get_by_label("Context (tokens)"), 32)
    idle(page)
    fill(main.get_by_label("Tokens to score", exact=True), 1_000_000)
    idle(page)
    main.get_by_role("button", name="Prune", exact=True).click()
    wait_while_running(page, "text=/perplexity of the (un)?pruned model/", main.get_by_role("button", name="Stop"))


def test_stop_inside_a_sweep_point_idles_the_server_and_caches_nothing(server, browser):
    page = new_page(browser, server["url"])
    main = start_long_sweep(page)  # the baseline is in: the point runs
    time.sleep(3)  # well inside the point's recovery steps
    pid = server["proc"].pid
    busy = cpu_load(pid, 1.0)
    print(f"\nserver CPU during the sweep point: {busy:.2f} cores")
    assert busy > busy_cpu(), "the sweep point was not running"
    main.get_by_role("button", name="Stop").first.click()
    clicked = time.time()
    page.wait_for_selector("text=/Stopped after 1 of 2 points/", timeout=TIMEOUT_MS)
    shown = time.time() - clicked  # the job ended and the page redrew its end state
    took = seconds_until_idle(pid, clicked)
    ended = server_side_end(server["log"])
    print(f"\nStop inside a sweep point: 'Stopped' shown {shown:.1f} s, server idle {took:.1f} s after the click; the "
          f"job ended {ended:.2f} s after the stop reached the server (load average {os.getloadavg()[0]:.1f})")
    assert took < IDLE_WITHIN and ended <= ends_within()
    time.sleep(2)
    assert written_after(server["cache"], clicked) == []
    idle(page)
    no_exception(page)
    assert "Stopped after 1 of 2 points" in main.inner_text()


def test_closing_the_tab_during_a_long_prune_stops_it(server, browser):
    page = new_page(browser, server["url"])
    start_long_prune(page)
    time.sleep(2)
    pid = server["proc"].pid
    busy = cpu_load(pid, 1.0)
    print(f"\nserver CPU during the prune: {busy:.2f} cores")
    assert busy > busy_cpu(), "the prune was not running"
    page.close()
    closed = time.time()
    took = seconds_until_idle(pid, closed)
    ended = server_side_end(server["log"])
    print(f"\nTab closed during a prune: idle {took:.1f} s after closing; the job ended {ended:.2f} s after the "
          f"session's end was noticed (load average {os.getloadavg()[0]:.1f})")
    assert took < IDLE_WITHIN and ended <= ends_within()
    assert written_after(server["cache"], closed) == []
    assert "its session ended" in server["log"].read_text()


def test_sigterm_during_a_job_exits_0(server, browser):
    page = new_page(browser, server["url"])
    start_long_prune(page)
    proc = server["proc"]
    proc.send_signal(signal.SIGTERM)
    sent = time.time()
    code = proc.wait(timeout=30)
    exited = time.time() - sent
    ended = server_side_end(server["log"], limit=2)
    print(f"\nSIGTERM during a prune: exit {code} after {exited:.1f} s; the job ended {ended:.2f} s after the signal "
          f"reached the server (load average {os.getloadavg()[0]:.1f})")
    log = server["log"].read_text()
    assert code == 0, log[-2000:]
    assert "terminate called" not in log and "SIGTERM received for the prune job" in log
    assert exited < 10 and ended <= ends_within()


def test_an_out_of_range_typed_number_says_so(server, browser):
    """Build 8: a number field holding a typed value above its maximum says so (the page keeps the last valid
    value, which the field shows again once it loses focus)."""
    page = new_page(browser, server["url"])
    open_page(page, "Prune")
    main = page.locator("[data-testid='stMain']")
    main.get_by_text("Evaluation settings (test split; kernel timing)").click()
    field = main.get_by_label("Tokens to score", exact=True)
    field.fill("2000000")
    field.press("Enter")
    page.wait_for_timeout(500)
    assert field.get_attribute("aria-invalid") == "true" or \
        page.get_by_text("Number is outside the allowed range").count() > 0  # Streamlit's own flag on the field
    assert "In use: context 256, 4,096 tokens to score" in main.inner_text()  # and the page states what it uses
