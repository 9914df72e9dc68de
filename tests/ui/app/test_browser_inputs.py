"""A 5,000-character Local directory path in a real browser: one sentence in the page, no traceback (issue 13.4)."""

import pytest

from browser_utils import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, app_server, idle
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = save_tiny_lm(tmp_path_factory.mktemp("browser-inputs-lm"))
    with app_server(tmp_path_factory, "inputs", model) as url:
        yield {"url": url, "model": str(model)}


def test_a_5000_character_model_path_is_one_sentence(server):
    from playwright.sync_api import expect, sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(server["url"], timeout=TIMEOUT_MS)
            idle(page)
            field = page.get_by_label("Model directory")
            # polled: the first idle frame can come before the first script run has drawn the sidebar
            expect(field).to_have_value(server["model"], timeout=TIMEOUT_MS)
            field.fill("/tmp/" + "x" * 5000)
            field.press("Enter")
            idle(page)
            assert page.locator("[data-testid='stException']").count() == 0
            errors = page.locator("[data-testid='stAlertContentError']")
            assert errors.count() == 1
            message = errors.first.inner_text().strip()
            assert "File name too long" in message and len(message) < 400 and "Traceback" not in message
            field.fill(server["model"])  # the app keeps working
            field.press("Enter")
            idle(page)
            page.wait_for_selector("[data-testid='stPlotlyChart'] .main-svg", timeout=TIMEOUT_MS)
            assert page.locator("[data-testid='stAlertContentError']").count() == 0
        finally:
            browser.close()
