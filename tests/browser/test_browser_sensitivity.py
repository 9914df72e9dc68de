"""The layer-sensitivity map in a real browser: it fills in point by point, stops, and resumes from the cache."""
import re

import pytest

from browser_utils import (ARTIFACTS, TIMEOUT_MS, app_server, chromium_page, full_screenshot, idle, no_exception,
                           open_page)
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`streamlit run` on a tiny random-init model with its own cache (never the bundled samples)."""
    model = save_tiny_lm(tmp_path_factory.mktemp("browser-sensitivity-lm"))
    with app_server(tmp_path_factory, "sensitivity", model) as url:
        yield url


def _filled_cells(page) -> int:
    """Heatmap cells that carry a measured value (the map's cells show their Δ, ± its standard error, as text)."""
    chart = page.locator("[data-testid='stPlotlyChart']", has_text="each layer alone").first
    texts = chart.locator(".heatmaplayer text, g.textpoint text, .hm text").all_text_contents()
    return sum(bool(re.fullmatch(r"[+\-−]?[0-9.e+\-]+( ± [0-9.e+\-]+)?", t.strip())) for t in texts)


def _cells_settle_at(page, expected: int) -> int:
    """The filled-cell count once plotly has redrawn (it draws after the script is idle): `expected`, or the last."""
    for _ in range(40):
        count = _filled_cells(page)
        if count == expected:
            break
        page.wait_for_timeout(250)
    return count


def test_sensitivity_map_fills_live_and_survives_stop_and_resume(server):
    with chromium_page(server) as page:
        idle(page)
        open_page(page, "Prune")
        tokens = page.get_by_label("Validation tokens per point")
        tokens.fill("2048")
        tokens.press("Enter")
        idle(page)
        ratios = page.get_by_label("Map ratios ρ (comma-separated)")
        ratios.fill("0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8")  # 17 points: time to stop
        ratios.press("Enter")
        idle(page)
        assert _filled_cells(page) == 0

        page.get_by_role("button", name="Run map").click()
        page.wait_for_selector("text=/\\b([2-9]|1[0-2]) of 17 points/", timeout=TIMEOUT_MS)   # filling in live
        page.locator("[data-testid='stMain']").get_by_role("button", name="Stop").first.click()
        page.wait_for_selector("text=/Stopped after ([2-9]|1[0-6]) of 17 points/", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)
        stopped = int(re.search(r"Stopped after (\d+) of 17", page.locator("[data-testid='stMain']").inner_text())[1])
        assert _cells_settle_at(page, stopped - 1) == stopped - 1   # the unpruned baseline is not a cell
        assert page.get_by_role("button", name="Resume map").count() == 1

        page.get_by_role("button", name="Resume map").click()
        page.wait_for_selector("button:has-text('Run again (cached)')", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)
        assert _cells_settle_at(page, 16) == 16
        full_screenshot(page, ARTIFACTS / "sensitivity.png")
