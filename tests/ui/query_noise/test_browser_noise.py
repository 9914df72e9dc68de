"""Query noise in a real browser on gated-deltanet-small (whose layer-0 head-0 states are rank 1 in some sequences):
no singular direction beyond the numerical rank is shown as a result, and the Monte Carlo runs only after its
button is clicked, as a background job with step progress and a Stop button."""
import re

import pytest

from browser_utils import (ARTIFACTS, ROOT, TIMEOUT_MS, app_server, chromium_page, full_screenshot, idle, no_exception,
                           open_page, plotly_value)

pytestmark = pytest.mark.browser
MODEL = ROOT / "sample_models" / "gated-deltanet-small"

TRACES = "gd => gd.data.map(t => ({name: t.name, group: t.legendgroup, mode: t.mode, y: t.y}))"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not (MODEL / "config.json").exists():
        pytest.skip("the bundled sample gated-deltanet-small is not installed")
    with app_server(tmp_path_factory, "noise", MODEL.name) as url:
        yield url


def plot_traces(page, until=None) -> list[dict]:
    return plotly_value(page.locator("[data-testid='stPlotlyChart'] .js-plotly-plot").first, TRACES, until)


def test_query_noise_directions_within_rank_and_monte_carlo_on_click(server):
    with chromium_page(server) as page:
        page.wait_for_selector("h1:has-text('Model')", timeout=TIMEOUT_MS)
        idle(page)
        open_page(page, "Query noise")  # layer 0, head 0 by default

        # the page says which directions it leaves out, and why
        note = page.get_by_text(re.compile("beyond the numerical rank")).first
        note.wait_for(timeout=20_000)  # the page is idle: the note is there or never comes
        rank = int(re.search(r"\(rank (\d+) at", note.inner_text()).group(1))
        assert rank == 1  # some sequences' layer-0 head-0 states are numerically rank 1
        chips = page.locator("[data-testid='stMultiSelectTagsContainer'] [data-tag]").evaluate_all(
            "tags => tags.map(t => t.getAttribute('aria-label'))")
        assert chips and all(int(c) <= rank for c in chips), chips  # the chosen directions

        # no direction beyond the rank in the plot, no absurd figures, and no Monte Carlo before the click
        traces = plot_traces(page)
        shown = {int(m.group(1)) for t in traces if (m := re.match(r"direction (\d+)", t["group"] or ""))}
        assert shown and max(shown) <= rank, shown
        assert all(v is None or v < 100 for t in traces for v in t["y"]), "a relative error ≥ 100 is shown"
        assert not [t for t in traces if t["mode"] == "markers"]
        monte_carlo_bars = page.locator("[data-testid='stProgress']", has_text="Monte Carlo")
        assert monte_carlo_bars.count() == 0  # (the states collection's own progress box may be there)
        full_screenshot(page, ARTIFACTS / "query_noise_before_monte_carlo.png")

        page.get_by_role("button", name="Run Monte Carlo").click()
        monte_carlo_bars.first.wait_for(timeout=TIMEOUT_MS)  # progress while the job runs
        page.get_by_text(re.compile(r"Monte Carlo: \d+ of \d+ steps done")).first.wait_for(timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)
        traces = plot_traces(page, until=lambda ts: any(t["mode"] == "markers" for t in ts))
        mc = [t for t in traces if t["mode"] == "markers"]
        assert mc and all(re.match(r"(direction 1|real keys)", t["group"]) for t in mc), [t["name"] for t in mc]
        assert page.get_by_role("button", name="Run again (cached)").count() == 1
        full_screenshot(page, ARTIFACTS / "query_noise_after_monte_carlo.png")
