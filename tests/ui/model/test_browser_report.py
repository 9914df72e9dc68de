"""Issue 23.3: the exported HTML report opens in a real browser with every network request blocked and draws its
charts from the embedded plotly.js; not one request leaves file://."""
import json
import subprocess
import sys

import pytest

from browser_utils import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, ROOT

pytestmark = pytest.mark.browser
MODEL = ROOT / "sample_models" / "deltanet-small"
SMALL = ["--tokens", "64", "--batch", "2", "--samples", "16", "--snr", "20", "--calib-sequences", "2",
         "--calib-tokens", "64"]


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    if not (MODEL / "config.json").exists():
        pytest.skip("the bundled sample deltanet-small is not installed")
    out = tmp_path_factory.mktemp("report") / "report.html"
    done = subprocess.run([sys.executable, "-m", "analysis", "report", "deltanet-small", "--device", "cpu",
                           "--out", str(out), "--quiet", *SMALL], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return out


def test_report_draws_its_charts_offline_without_a_single_network_request(report_file):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout, sync_playwright
    attempted, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})
            context.set_offline(True)

            def block(route):
                if not route.request.url.startswith("file://"):
                    attempted.append(route.request.url)
                    return route.abort()
                return route.continue_()
            context.route("**/*", block)
            page = context.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("request", lambda r: None if r.url.startswith(("file://", "data:")) else attempted.append(r.url))
            page.goto(report_file.as_uri())
            try:
                page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3",
                                       timeout=60_000)
            except PlaywrightTimeout:
                pytest.fail(f"the charts were not drawn; requests blocked: {attempted}, page errors: {errors}")
            drawn = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
                id: gd.id, types: gd.data.map(t => t.type), z: gd.data[0].z || null,
                points: gd.querySelectorAll('.heatmaplayer image, .scatterlayer path.js-line, .hm').length}))""")
            embedded = json.loads(page.evaluate("document.getElementById('report-data').textContent"))
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report_offline.png"), full_page=True)
        finally:
            browser.close()
    assert attempted == [] and errors == []
    by_id = {d["id"]: d for d in drawn}
    assert set(by_id) == {"rank-grid", "spectra", "agreement"}
    assert by_id["rank-grid"]["types"] == ["heatmap"] and by_id["rank-grid"]["points"] >= 1
    assert by_id["spectra"]["types"] == ["scatter"] * 4 and by_id["spectra"]["points"] >= 4  # 4 layers, 4 lines
    # what the browser drew is what the core measured (the embedded numbers)
    grid = [[h["effective_rank"] for h in layer["heads"]] for layer in embedded["rank"]["layers"]]
    drawn_z = [v for row in by_id["rank-grid"]["z"] for v in row]
    assert drawn_z == pytest.approx([v for row in grid for v in row], rel=1e-12)  # the same float64s, JSON twice
