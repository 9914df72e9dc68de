"""The Shrink pages in a real browser: a prune, a 2-point sweep (screenshots in tests/artifacts/), Stop and Resume."""

import pytest

from browser_utils import (ARTIFACTS, TIMEOUT_MS, app_server, chromium_page, full_screenshot, idle, no_exception,
                           open_page, run_sweep, set_ratios)
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`streamlit run` on a tiny random-init model with its own sweep cache (never the bundled samples)."""
    model = save_tiny_lm(tmp_path_factory.mktemp("browser-shrink-lm"))
    with app_server(tmp_path_factory, "shrink", model) as url:
        yield url


def test_prune_and_sweep_in_a_real_browser(server):
    with chromium_page(server) as page:
        idle(page)

        open_page(page, "Prune")
        page.get_by_role("button", name="Prune", exact=True).click()
        page.wait_for_selector("h3:has-text('Before and after')", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)
        table = page.locator("[data-testid='stTable']").last.inner_text()
        assert "after pruning" in table and "perplexity (Shakespeare" in table and "32, 32" in table
        assert page.get_by_role("button", name="Download the pruned model (.zip)").count() == 1
        full_screenshot(page, ARTIFACTS / "prune.png")

        open_page(page, "Sweep & latency")
        page.get_by_role("button", name="Remove Wanda").first.click()  # the sweep's, not equal budgets'
        idle(page)
        ratios = set_ratios(page, "0.5")
        run_sweep(page)
        no_exception(page)
        chart = page.locator("[data-testid='stPlotlyChart']").first
        legend = chart.locator(".legendtext").all_text_contents()
        assert legend == ["Random", "L1 magnitude"], legend
        assert chart.locator(".scatterlayer .point").count() == 2
        full_screenshot(page, ARTIFACTS / "sweep.png")

        # Stop between points, then resume: finished points come back from the disk cache
        ratios.fill("0.2, 0.4, 0.6, 0.8")
        ratios.press("Enter")
        idle(page)
        page.get_by_role("button", name="Run sweep").click()
        page.wait_for_selector("text=/[2-7] of 9 points/", timeout=TIMEOUT_MS)
        # the page's Stop, not the toolbar's (that one ends the run without the callback: the job resumes)
        page.locator("[data-testid='stMain']").get_by_role("button", name="Stop").first.click()
        page.wait_for_selector("text=/Stopped after [2-8] of 9 points/", timeout=TIMEOUT_MS)
        idle(page)
        page.get_by_role("button", name="Resume sweep").click()
        page.wait_for_selector("button:has-text('Run again (cached)')", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)
        assert chart.locator(".scatterlayer .point").count() == 8
