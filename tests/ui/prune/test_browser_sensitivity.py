"""The layer-sensitivity map in a real browser: it fills in point by point, stops, and resumes from the cache.
Issue 29: a typed per-layer plan is predicted, verified beside the others, charted and restored by a click."""
import re

import pytest

from browser_utils import (ARTIFACTS, TIMEOUT_MS, app_server, chromium_page, choose, fill, full_screenshot,
                           idle, no_exception, open_page, plotly_value)
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`streamlit run` on a tiny random-init model with its own cache (never the bundled samples)."""
    model = save_tiny_lm(tmp_path_factory.mktemp("browser-sensitivity-lm"))
    with app_server(tmp_path_factory, "sensitivity", model,
                    STATE_RANK_OUTPUT_ROOT=str(tmp_path_factory.mktemp("sensitivity-out"))) as url:
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


PLAN = (0.25, 0.75)  # dk 32 → 24 and 8: both on the map's grid below


def inputs(main) -> list[float]:
    return [float(main.get_by_label(f"ratio ρ, layer {i}", exact=True).input_value()) for i in range(len(PLAN))]


def test_a_typed_plan_is_predicted_verified_charted_and_restored_by_a_click(server):
    with chromium_page(server) as page:
        idle(page)
        open_page(page, "Prune")
        main = page.locator("[data-testid='stMain']")
        choose(page, main, "Strategy", "L1 magnitude")
        fill(main.get_by_label("Map ratios ρ (comma-separated)"), "0.25, 0.75")
        fill(main.get_by_label("Validation tokens per point"), 256)
        main.get_by_role("button", name="Run map").click()
        page.wait_for_selector("button:has-text('Run again (cached)')", timeout=TIMEOUT_MS)
        idle(page)

        main.get_by_text("Per layer", exact=True).click()
        idle(page)
        for layer, rho in enumerate(PLAN):
            fill(main.get_by_label(f"ratio ρ, layer {layer}", exact=True), rho)
        no_exception(page)
        said = main.get_by_text(re.compile(r"^Your plan: predicted Δ log perplexity")).inner_text()
        assert re.search(r"([+-]\d\.\d{4}|0\.0000|< 0\.00005) ± \d\.\d{4} nats/token \(1σ\)", said)  # signed(): no sign on 0
        assert re.search(r"state [\d,]+ of [\d,]+ fp32 bytes per sequence, \d+ kernel tiles", said)
        table = main.locator("[data-testid='stDataFrame']", has_text="predicted Δ log perplexity").first
        assert table.count() == 1

        main.get_by_role("button", name="Verify and choose").click()
        page.wait_for_selector("text=/Chosen on the choice tokens: .*Your typed plan stays in the inputs/", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)
        # issue 40: the answer is measured on held-out tokens, and the typed plan stays in the inputs
        assert main.get_by_text(re.compile(r"On new text: ")).count() >= 1
        assert main.get_by_role("button", name=re.compile("Use the recommended plan")).count() >= 1
        verified = main.locator("[data-testid='stTable']", has_text="vs chosen").first
        assert verified.count() == 1

        chart = main.locator("[data-testid='stPlotlyChart']", has_text="measured Δ vs state").first
        chart.scroll_into_view_if_needed()
        plot = chart.locator(".js-plotly-plot").first
        labels = plotly_value(plot, "gd => gd.data.flatMap(t => (t.customdata || []).map(c => c[1]))",
                              until=lambda v: any(x.endswith("your plan") for x in v))
        mine = next(x for x in labels if x.endswith("your plan"))

        fill(main.get_by_label("ratio ρ, layer 0", exact=True), 0.5)  # the inputs move on…
        fill(main.get_by_label("ratio ρ, layer 1", exact=True), 0.5)
        assert inputs(main) == [0.5, 0.5]
        chart = main.locator("[data-testid='stPlotlyChart']", has_text="measured Δ vs state").first
        chart.scroll_into_view_if_needed()
        area = chart.locator(".nsewdrag").first.bounding_box()       # the plot area, where clicks select
        x, y = plotly_value(chart.locator(".js-plotly-plot").first, f"""gd => {{
            const L = gd._fullLayout;
            for (const t of gd.data) for (let i = 0; i < (t.customdata || []).length; i++)
                if (t.customdata[i][1] === {mine!r}) return [L.xaxis.l2p(t.x[i]), L.yaxis.l2p(t.y[i])];
            return null; }}""")
        page.mouse.click(area["x"] + x, area["y"] + y)                 # …and a click on the point brings it back
        try:
            page.wait_for_selector(f"text=The plan of {mine} is in the per-layer inputs", timeout=60_000)
        finally:
            full_screenshot(page, ARTIFACTS / "plan_history.png")
        idle(page)
        no_exception(page)
        assert inputs(main) == pytest.approx(list(PLAN), abs=1e-3)
