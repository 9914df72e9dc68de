"""Shared pieces of the real-browser tests: constants, a free port, and the dashboard server in a subprocess."""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
PAGES = [("Model", True), ("States & rank", True), ("Query noise", True), ("State lab", True), ("Channel importance", False),
         ("Prune", False), ("Sweep & latency", False)]  # (navigation label = page title, draws a chart)
TIMEOUT_MS = 240_000
LAUNCH = ("ui.shared.launch",)  # `python -m ui.shared.launch`, as `make run` and the Docker images start it
COLD_LAUNCH = ("streamlit", "run", "app.py")  # no import warm-up (benchmarks/first_chart.py compares the two)


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
def streamlit_server(env: dict, log_path: Path, launch: tuple[str, ...] = LAUNCH):
    """The dashboard on a free port until the block ends (as `make run` starts it); yields the base URL."""
    with server_process(env, log_path, launch) as (url, _proc):
        yield url


@contextlib.contextmanager
def server_process(env: dict, log_path: Path, launch: tuple[str, ...] = LAUNCH):
    """As streamlit_server, yielding (base URL, the server's Popen) for tests that watch or signal the process."""
    port = free_port()
    log = open(log_path, "w+")
    proc = subprocess.Popen([sys.executable, "-m", *launch, "--server.headless", "true",
                             "--server.port", str(port), "--server.fileWatcherType", "none"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        yield url, proc
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


@contextlib.contextmanager
def app_server(tmp_path_factory, name: str, model, **env):
    """`streamlit run` with `model` as the default model, one intra-op thread (a shared 2-core box) and its own
    sweep cache (never the project's); skips when Debian chromium is missing. Extra `env` entries override."""
    import pytest
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian chromium not found (/usr/bin/chromium): install it with `make chromium`")
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(model), "OMP_NUM_THREADS": "1",
           "STATE_RANK_CACHE": str(tmp_path_factory.mktemp(f"{name}-cache")), **env}
    with streamlit_server(env, tmp_path_factory.mktemp(f"{name}-log") / "server.log") as url:
        yield url


@contextlib.contextmanager
def chromium_page(url: str, width: int = 1440, height: int = 1000):
    """A page of Debian's headless chromium, opened at `url`; the browser closes when the block ends."""
    from playwright.sync_api import sync_playwright
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(url, timeout=TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def idle(page) -> None:
    """The script finished (twice, 300 ms apart: a click can start a rerun right after an idle frame)."""
    page.wait_for_selector(IDLE, timeout=TIMEOUT_MS)
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=TIMEOUT_MS)


def no_exception(page) -> None:
    errors = page.locator("[data-testid='stException'], [data-testid='stAlertContentError']")
    assert errors.count() == 0, errors.first.inner_text()


def plotly_value(chart, expression: str, until=None, timeout_ms: int = TIMEOUT_MS):
    """`expression` (a JS function of the plotly div) evaluated once the chart is drawn, and `until(value)` holds.

    Plotly fills `gd.data` after its div is in the DOM, and again after each rerun: reading it once right after
    the script goes idle can find no data yet, or the previous figure. So poll, re-resolving the locator each time.
    """
    probe = f"gd => (Array.isArray(gd.data) && gd.data.length) ? ({expression})(gd) : null"
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        value = chart.evaluate(probe, timeout=timeout_ms)
        if value is not None and (until is None or until(value)):
            return value
        assert time.monotonic() < deadline, f"the chart never showed the expected data (last: {value!r})"
        chart.page.wait_for_timeout(100)


def settle(page, title: str, chart: bool) -> float:
    """Wait until the run for `title` is idle with its chart (if any) drawn; return when that first held.

    The returned time excludes the debounce that follows (a rerun may start right after an idle frame).
    """
    page.wait_for_selector(f"h1:has-text('{title}')", timeout=TIMEOUT_MS)
    page.wait_for_selector(IDLE, timeout=TIMEOUT_MS)
    if chart:
        page.wait_for_selector("[data-testid='stPlotlyChart'] .main-svg", timeout=TIMEOUT_MS)
    ready = time.time()
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=TIMEOUT_MS)
    return ready


def open_page(page, title: str) -> None:
    """Click the sidebar navigation link `title` and wait for the page to settle without errors."""
    page.locator("[data-testid='stSidebarNavLink']", has_text=title).first.click()
    page.wait_for_selector(f"h1:has-text('{title}')", timeout=TIMEOUT_MS)
    idle(page)
    no_exception(page)


def set_ratios(page, ratios: str):
    """Type the sweep's ratio list; returns the input (reused for later edits)."""
    field = page.get_by_label("Ratios ρ (comma-separated)")
    field.fill(ratios)
    field.press("Enter")
    idle(page)
    return field


def run_sweep(page) -> None:
    """Click Run sweep and wait until every point is in (the button then offers a cached rerun)."""
    page.get_by_role("button", name="Run sweep").click()
    page.wait_for_selector("button:has-text('Run again (cached)')", timeout=TIMEOUT_MS)
    idle(page)


def full_screenshot(page, path: Path) -> None:
    """Streamlit scrolls inside its main container, so grow the viewport to the content before the shot."""
    size = page.viewport_size
    height = page.evaluate("Math.max(...[...document.querySelectorAll('[data-testid=stMain], section')]"
                           ".map(e => e.scrollHeight), document.body.scrollHeight)")
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 40, 8000)})
    page.wait_for_timeout(500)  # plotly re-lays out on resize
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)


LAB_TITLE = "gd => (gd.layout && gd.layout.title && gd.layout.title.text) || ''"


def lab_step_seconds(page, steps: int) -> list[tuple[float, float]]:
    """State lab scrubber steps as a user feels them: per step, (seconds from the key press that moves the token
    slider to the state heatmap showing the new token — its title names it —, seconds to the end of that run,
    every chart below redrawn). The page must show the State lab; each step moves one token left."""
    scrubber = page.locator("[data-testid='stSlider']", has_text="Token t").get_by_role("slider").first
    t = int(scrubber.input_value())
    times = []
    for _ in range(steps):
        t -= 1
        scrubber.focus()
        start = time.perf_counter()
        scrubber.press("ArrowLeft")
        page.wait_for_function(f"t => new RegExp('after token ' + t + '(?![0-9])').test(({LAB_TITLE})("
                               "document.querySelector('.st-key-lab_state .js-plotly-plot')))", arg=t,
                               timeout=TIMEOUT_MS, polling=10)
        drawn = time.perf_counter() - start
        page.wait_for_selector(IDLE, timeout=TIMEOUT_MS)
        times.append((drawn, time.perf_counter() - start))
        idle(page)  # settled before the next step
    return times


def shown_choice(selectbox) -> str:
    """What a Streamlit selectbox shows as chosen (its text, and its input's value and label, wherever this
    Streamlit version puts the choice)."""
    return selectbox.evaluate("el => el.innerText + ' ' + [...el.querySelectorAll('input')].map(i => i.value + ' '"
                              " + (i.getAttribute('aria-label') || '')).join(' ')")


def choose(page, scope, label: str, option: str) -> None:
    """Pick `option` in the selectbox `label`; a click that lands while a rerun redraws the box leaves it shut,
    so click until its list is open."""
    box = scope.get_by_label(label, exact=True)
    for _ in range(5):
        box.click()
        page.wait_for_timeout(300)
        if box.get_attribute("aria-expanded") == "true":
            break
    page.get_by_role("option", name=option, exact=True).click()
    idle(page)


def fill(field, value) -> None:
    """Type `value` into an input and commit it (Enter), then wait for the rerun."""
    field.fill(str(value))
    field.press("Enter")
    idle(field.page)


JOB_CAP_S = 3600  # a job that shows no sign of ending within an hour is stuck, however loaded the host


def wait_while_running(page, selector: str, stop_buttons, poll_ms: int = 5_000) -> None:
    """Wait for `selector` for as long as the job runs (one of `stop_buttons` is enabled: a page may show several
    jobs' Stop, e.g. the Prune page's map above its prune), not for a fixed wall time:
    on a host loaded by other work a point may take many minutes, and that is not a failure; a job that ended
    without showing `selector` is (said at once, not after a timeout)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    deadline = time.monotonic() + JOB_CAP_S
    while True:
        try:
            page.wait_for_selector(selector, timeout=poll_ms)
            return
        except PlaywrightTimeout:
            pass
        if not any(b.is_enabled() for b in stop_buttons.all()):  # Stop is live exactly while its job runs
            page.wait_for_selector(selector, timeout=poll_ms)  # it may have shown it as it ended
            return
        assert time.monotonic() < deadline, f"the job was still running after {JOB_CAP_S} s without showing {selector}"


def start_long_sweep(page):
    """Sweep & latency, one strategy at one ratio with 1,000 recovery steps (minutes of work on a tiny model);
    returns the main area once the unpruned baseline is in and the point runs, however long the baseline took
    on a loaded host (it waits on the job's state, not a fixed time)."""
    open_page(page, "Sweep & latency")
    main = page.locator("[data-testid='stMain']")
    for name in ("Random", "Wanda"):
        main.get_by_role("button", name=f"Remove {name}").first.click()  # the sweep's (heads have one too)
        idle(page)
    fill(main.get_by_label("Ratios ρ (comma-separated)"), "0.5")
    fill(main.get_by_label("Tokens to score", exact=True), 256)
    fill(main.get_by_label("Recovery steps per point"), 1000)  # minutes of work: under the one-hour refusal
    main.get_by_role("button", name="Run sweep").click()
    wait_while_running(page, "text=/1 of 2 points/", main.get_by_role("button", name="Stop"))
    return main
