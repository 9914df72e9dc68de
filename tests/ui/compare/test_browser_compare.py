"""Original vs pruned side by side in a real browser (issue 23 item 2): States & rank on the bundled deltanet-small
beside a pruned copy saved by the core; picking "a saved model directory" shows the two heatmaps in two columns
(different values, one shared colour range), the difference map and the per-layer/head table of what changed."""
import pytest

from browser_utils import (ARTIFACTS, ROOT, TIMEOUT_MS, app_server, choose, chromium_page, full_screenshot, idle,
                           no_exception, open_page, plotly_value)
from ui_fixtures import save_pruned_sample

pytestmark = pytest.mark.browser
MODEL = ROOT / "sample_models" / "deltanet-small"
DIMS = [32, 48, 64, 16]


@pytest.fixture(scope="module")
def pruned_dir(tmp_path_factory):
    if not (MODEL / "config.json").exists():
        pytest.skip("the bundled sample deltanet-small is not installed")
    import analysis
    analysis.ready()
    return save_pruned_sample(MODEL, tmp_path_factory.mktemp("cmp") / "deltanet-small-l1", DIMS)[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, pruned_dir):
    with app_server(tmp_path_factory, "compare", MODEL.name) as url:
        yield url


HEAT = "gd => ({z: gd.data[0].z, zmin: gd.data[0].zmin, zmax: gd.data[0].zmax})"


def test_states_shows_original_and_pruned_in_two_columns(server, pruned_dir):
    with chromium_page(server) as page:
        page.wait_for_selector("h1:has-text('Model')", timeout=TIMEOUT_MS)
        idle(page)
        sidebar = page.locator("[data-testid='stSidebar']")
        for label, value in (("Tokens per sequence", 64), ("Number of sequences", 2)):  # small: a shared 2-core host
            field = sidebar.get_by_label(label)
            field.fill(str(value))
            field.press("Enter")
            idle(page)
        open_page(page, "States & rank")
        main = page.locator("[data-testid='stMain']")
        main.locator("[data-testid='stSelectbox']").filter(has_text="Compare with").first.click()
        page.get_by_role("option", name="a saved model directory").click()
        idle(page)
        field = main.get_by_label("Saved model directory")
        field.fill(str(pruned_dir))
        field.press("Enter")
        idle(page)
        no_exception(page)
        # the maps in the metric the difference map always shows (its Δ is in directions whatever the maps show)
        choose(page, main, "Metric", "Effective rank (Roy-Vetterli) — directions used")
        no_exception(page)

        charts = main.locator("[data-testid='stPlotlyChart']")
        plot = lambda text: charts.filter(has_text=text).first.locator(".js-plotly-plot")  # noqa: E731
        original = plotly_value(plot("original:"), HEAT, timeout_ms=60_000)
        pruned = plotly_value(plot("pruned:"), HEAT, timeout_ms=60_000)
        assert len(original["z"]) == len(pruned["z"]) == len(DIMS)  # layers × heads, both models
        assert original["z"] != pruned["z"]  # layer 3 keeps 16 of 64 key channels
        assert (original["zmin"], original["zmax"]) == (pruned["zmin"], pruned["zmax"])  # one colour range
        # the two heatmaps stand side by side: same top, the pruned one to the right
        a, b = (charts.filter(has_text=t).first.bounding_box() for t in ("original:", "pruned:"))
        assert abs(a["y"] - b["y"]) < 5 and b["x"] > a["x"] + a["width"] / 2, (a, b)
        delta = plotly_value(plot("pruned − original"), "gd => gd.data[0].z", timeout_ms=60_000)
        want = [[p - o for p, o in zip(pr, orig)] for pr, orig in zip(pruned["z"], original["z"])]
        assert all(abs(d - w) < 1e-6 for dr, wr in zip(delta, want) for d, w in zip(dr, wr))
        assert page.get_by_text("What changed: pruned vs original").count() == 1
        assert main.get_by_text("dk per layer 32, 48, 64, 16").count() >= 1  # labels carry dk′
        full_screenshot(page, ARTIFACTS / "states_original_vs_pruned.png")
