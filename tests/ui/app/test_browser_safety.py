"""Issue 13 item 4 and issue 11 item 5 in a real browser: Prune → Save to /proc/nope/x or a 5,000-character
name gives one sentence (no traceback) and the page keeps working; the server listens on 127.0.0.1 only."""
import os
from pathlib import Path

import pytest

from browser_utils import TIMEOUT_MS, app_server, chromium_page, idle, no_exception, open_page
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`streamlit run` with the project's config, run for one local user (any Save path allowed)."""
    model = save_tiny_lm(tmp_path_factory.mktemp("browser-safety-lm"))
    outputs = tmp_path_factory.mktemp("outputs")
    with app_server(tmp_path_factory, "safety", model, STATE_RANK_OUTPUT_ROOT=str(outputs),
                    STATE_RANK_LOCAL="1") as url:
        yield url, outputs


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the TCP sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:   # 0A = LISTEN
                found.add(address)
    return found


def test_server_listens_on_localhost_only(server):
    url, _ = server
    addresses = listening_addresses(int(url.rsplit(":", 1)[1]))
    assert addresses == {"0100007F"}, addresses    # 127.0.0.1, not 0.0.0.0 / :: (all interfaces)


def save_error(page, target: str) -> str:
    field = page.get_by_label("Save to directory")
    field.fill(target)
    field.press("Enter")
    idle(page)
    page.get_by_role("button", name="Save", exact=True).click()
    idle(page)
    assert page.locator("[data-testid='stException']").count() == 0, "a traceback is shown"
    alerts = page.locator("[data-testid='stAlertContentError']")
    assert alerts.count() == 1
    return alerts.first.inner_text().strip()


def test_bad_save_paths_are_one_sentence_and_the_page_keeps_working(server):
    url, outputs = server
    with chromium_page(url) as page:
        idle(page)
        open_page(page, "Prune")
        page.get_by_role("button", name="Prune", exact=True).click()
        page.wait_for_selector("h3:has-text('Before and after')", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)

        for target, fragment in {"/proc/nope/x": "nothing can be created in /proc",
                                 "n" * 5000: "5000 characters long"}.items():
            message = save_error(page, target)
            assert fragment in message and message.endswith(".") and "\n" not in message, message
            assert "Traceback" not in message and "Error:" not in message and len(message) < 300

        page.get_by_label("Save to directory").fill(str(outputs / "kept"))   # the page still works
        page.get_by_label("Save to directory").press("Enter")
        idle(page)
        page.get_by_role("button", name="Save", exact=True).click()
        page.wait_for_selector("text=Saved to", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)
        assert (outputs / "kept" / "model.safetensors").is_file()
