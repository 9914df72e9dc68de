"""The real app in a real browser: `streamlit run` in a subprocess, Debian's chromium driven by Playwright.

Visits every page through the sidebar navigation, checks what is shown, saves a full-page screenshot
per page under tests/artifacts/, prints (does not assert) the time to the first chart and the page-switch
times, and renders two sessions at once to check they do not disturb each other.
"""
import os
import time
from pathlib import Path

import pytest

from browser_utils import (ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, PAGES, ROOT, TIMEOUT_MS, full_screenshot,
                           plotly_value, settle, streamlit_server)
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not found (/usr/bin/chromium): install it with `apt-get install -y chromium` "
                    "(`make chromium`); Playwright's own browser download is not used")
    real = ROOT / "sample_models" / "deltanet-small"
    default = real.name if (real / "config.json").exists() else save_tiny_lm(tmp_path_factory.mktemp("browser-lm"))
    # one intra-op thread: on a shared 2-core box, two threads make each small op wait for the busy core
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(default), "OMP_NUM_THREADS": "1"}
    start = time.time()
    with streamlit_server(env, tmp_path_factory.mktemp("streamlit-log") / "server.log") as url:
        yield {"url": url, "start": start, "model": Path(default).name}


def check(page, title: str, chart: bool) -> None:
    assert page.locator("h1").first.inner_text().strip() == title
    errors = page.locator("[data-testid='stException']")
    assert errors.count() == 0, errors.first.inner_text()
    assert page.get_by_text("What am I seeing?").count() >= 1
    if chart:
        assert page.locator("[data-testid='stPlotlyChart']").count() >= 1


def go(page, title: str, chart: bool) -> float:
    """Click the navigation link; seconds until the page is idle with its chart drawn."""
    t0 = time.time()
    page.locator("[data-testid='stSidebarNavLink']", has_text=title).first.click()
    return settle(page, title, chart) - t0


def click_heatmap_cell(page, layer: int, head: int) -> None:
    """Click a cell of the States heatmap: the drill-in charts must follow (plotly selection → rerun)."""
    page.locator("[data-testid='stSidebarNavLink']", has_text="States & rank").first.click()
    settle(page, "States & rank", True)
    chart = page.locator("[data-testid='stPlotlyChart']").first
    chart.scroll_into_view_if_needed()
    box = chart.locator(".nsewdrag").first.bounding_box()
    n_layers, n_heads = plotly_value(chart.locator(".js-plotly-plot").first,
                                     "gd => [gd.data[0].z.length, gd.data[0].z[0].length]")
    page.mouse.click(box["x"] + (head + 0.5) / n_heads * box["width"],
                     box["y"] + (layer + 0.5) / n_layers * box["height"])
    page.wait_for_selector(f"text=layer {layer}, head {head}", timeout=TIMEOUT_MS)
    settle(page, "States & rank", True)
    assert page.locator("[data-testid='stException']").count() == 0


def test_every_page_in_a_real_browser(server):
    from playwright.sync_api import sync_playwright
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    times = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(server["url"], timeout=TIMEOUT_MS)
            times["server start → first chart"] = settle(page, "Model", chart=True) - server["start"]
            check(page, "Model", True)
            for title, chart in PAGES:
                if title != "Model":
                    times[f"first visit: {title}"] = go(page, title, chart)
                check(page, title, chart)
                slug = title.lower().replace(" & ", "_").replace(" ", "_")
                full_screenshot(page, ARTIFACTS / f"{slug}.png")
            click_heatmap_cell(page, layer=1, head=1)
            times["revisit: Model"] = go(page, "Model", True)
            times["revisit: States & rank (computed)"] = go(page, "States & rank", True)
            times["revisit: Query noise (computed)"] = go(page, "Query noise", True)

            # a second session, at the same time, on another page
            other = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            other.goto(f"{server['url']}/states", timeout=TIMEOUT_MS)
            page.locator("[data-testid='stSidebarNavLink']", has_text="Model").first.click()
            settle(other, "States & rank", True)
            settle(page, "Model", True)
            check(other, "States & rank", True)
            check(page, "Model", True)
            assert other.locator("[data-testid='stPlotlyChart']").count() >= 3  # heatmap, trace, spectrum
            full_screenshot(other, ARTIFACTS / "second_session_states.png")
        finally:
            browser.close()
    print(f"\nbrowser timings ({server['model']}, OMP_NUM_THREADS=1):")
    for name, seconds in times.items():
        print(f"  {name:40s} {seconds:6.2f} s")
