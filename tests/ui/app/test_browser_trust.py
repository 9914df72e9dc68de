"""Issue 13 in a real browser (Debian chromium + Playwright), one `streamlit run` for the whole module.

Multiselects that can be emptied and have "only"/"All" shortcuts with uncut labels (item 3), named-step
progress on first visits with results reused across pages (item 6), heatmaps that show their values and
keep their titles whole and clear of the toolbar (item 9), and no request leaving the machine (the
favicon used to come from a font CDN). The tests share one page and run in file order.
"""
import os
import re

import pytest

from browser_utils import (CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, idle, no_exception, open_page, plotly_value,
                           streamlit_server)
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.browser

# Every progress-bar text, status label and listed step the page shows, recorded as the DOM changes
# (a step can be too brief to see on the bar; the status box's step list keeps it).
RECORD_PROGRESS = """
window.__seen = new Set();
new MutationObserver(() => {
  document.querySelectorAll("[data-testid='stProgress'], [data-testid='stExpander'] summary")
    .forEach(e => window.__seen.add(e.innerText.trim()));
  document.querySelectorAll("[data-testid='stExpanderDetails'] li")  // a status box's list of finished steps
    .forEach(e => window.__seen.add(e.textContent.trim()));
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
LOCAL = ("http://127.0.0.1", "http://localhost", "ws://127.0.0.1", "data:", "blob:", "about:")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """One server on a tiny random-init model and one browser page, shared by the tests of this file."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian chromium not found (/usr/bin/chromium): install it with `make chromium`")
    from playwright.sync_api import sync_playwright
    model = save_tiny_lm(tmp_path_factory.mktemp("browser-trust-lm"))
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(model), "OMP_NUM_THREADS": "1",
           "STATE_RANK_CACHE": str(tmp_path_factory.mktemp("trust-sweep-cache"))}
    with streamlit_server(env, tmp_path_factory.mktemp("streamlit-trust-log") / "server.log") as url, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.external = []
        page.on("request", lambda r: None if r.url.startswith(LOCAL) else page.external.append(r.url))
        page.add_init_script(RECORD_PROGRESS)
        page.goto(url, timeout=TIMEOUT_MS)
        idle(page)
        yield page
        browser.close()


def seen(page, until: str | None = None) -> list[str]:
    """Progress texts, status labels and listed steps shown since the last call (after `until` was shown)."""
    if until:
        page.wait_for_function("t => [...window.__seen].some(s => s.includes(t))", arg=until, timeout=TIMEOUT_MS)
        idle(page)
    return page.evaluate("() => { const s = [...window.__seen]; window.__seen.clear(); return s; }")


def chips(ms) -> list[str]:
    return [t.get_attribute("title") for t in ms.locator("[data-testid='stMultiSelectTagsContainer'] span[title]").all()]


def test_nothing_is_fetched_from_outside_and_the_favicon_is_served_by_the_app(page):
    open_page(page, "States & rank")
    assert page.external == [], page.external
    icon = page.locator("link[rel~='icon']").first.get_attribute("href")
    assert icon and not icon.startswith("http") or icon.startswith(LOCAL), icon


def test_first_visits_show_named_steps_and_calibration_is_computed_once(page):
    open_page(page, "States & rank")
    seen(page)
    # the stride-8 collection ran in the test above; a new stride is a new collection
    stride = page.get_by_label("Stride (tokens)", exact=True)
    stride.fill("16")
    stride.press("Enter")
    texts = seen(page, until="collected")
    assert any(re.search(r"layer 1 of 2: recurrence", t) for t in texts), texts
    assert any("Recurrent states of" in t and "collected" in t for t in texts), texts

    page.locator("[data-testid='stSelectbox']").filter(has_text="Metric").first.click()   # issue 43: not the default
    page.get_by_role("option", name="Rank utilization", exact=True).click()
    idle(page)
    page.get_by_label("Rank utilization after every token", exact=True).check(force=True)
    texts = seen(page, until="tracked after every token")
    no_exception(page)
    assert any(re.search(r"layer 2 of 2: tracking s₁", t) for t in texts), texts

    open_page(page, "Channel importance")
    texts = seen(page, until="Gradient (Taylor) scored")  # each strategy has its own box; the gradient is scored last
    assert any(re.search(r"forward pass, (pass \d of \d, )?layer 2 of 2: activations", t) for t in texts), texts
    assert any("Calibration ready: 16×256 tokens" in t for t in texts), texts
    assert any("scoring the channels: DRRQR" in t for t in texts), texts

    # Prune reuses the calibration the importance page computed: no forward pass this time
    open_page(page, "Prune")
    page.get_by_role("button", name="Prune", exact=True).click()
    page.wait_for_selector("h3:has-text('Before and after')", timeout=TIMEOUT_MS)
    idle(page)
    no_exception(page)
    texts = seen(page)
    assert not any("forward pass" in t for t in texts), texts
    caption = page.locator("[data-testid='stMain']").inner_text()  # the prune (a background job) names its data
    assert "calibration: 16×256 tokens" in caption, caption[-2000:]


def test_multiselect_empties_and_has_only_and_all_shortcuts_with_whole_labels(page):
    open_page(page, "Channel importance")
    ms = page.locator("[data-testid='stMultiSelect']").first
    names = chips(ms)
    assert len(names) == 6 and "PCA (rotation, not axis-aligned)" in names, names
    box = ms.bounding_box()
    for tag in ms.locator("[data-testid='stMultiSelectTagsContainer'] span[title]").all():
        width = tag.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert width[0] <= width[1], (tag.get_attribute("title"), width)   # text not cut with an ellipsis
        t = tag.bounding_box()
        assert box["x"] <= t["x"] and t["x"] + t["width"] <= box["x"] + box["width"] + 1, tag.get_attribute("title")
        assert t["y"] + t["height"] <= box["y"] + box["height"] + 1, tag.get_attribute("title")

    page.get_by_role("radiogroup", name="Only this one").get_by_role("radio", name="Wanda", exact=True).click()
    idle(page)
    assert chips(ms) == ["Wanda"]
    ms.get_by_role("button", name="Remove Wanda").click()
    idle(page)
    no_exception(page)
    assert chips(ms) == []
    page.get_by_text("No strategy picked").wait_for(timeout=TIMEOUT_MS)  # the rerun may still be drawing on a busy host
    assert page.get_by_text("No strategy picked").count() == 1
    assert page.locator("h3:has-text('Scores')").count() == 0

    open_page(page, "Model")
    open_page(page, "Channel importance")
    assert chips(page.locator("[data-testid='stMultiSelect']").first) == []   # still empty after a page switch
    page.locator("[data-testid='stMain']").get_by_role("button", name="All", exact=True).click()
    idle(page)
    assert len(chips(page.locator("[data-testid='stMultiSelect']").first)) == 6


def _overlap(a, b) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"] or
                a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def test_heatmaps_show_values_keep_titles_whole_and_offer_a_fixed_scale(page):
    open_page(page, "States & rank")
    page.get_by_label("Compare with random init", exact=True).check(force=True)
    idle(page)
    no_exception(page)
    charts = page.locator("[data-testid='stPlotlyChart']")
    for i in (0, 1):  # trained and random init, side by side
        chart = charts.nth(i)
        chart.scroll_into_view_if_needed()
        gd = chart.locator(".js-plotly-plot").first
        z = plotly_value(gd, "gd => gd.data[0].z")
        assert chart.locator(".heatmaplayer text").count() == len(z) * len(z[0])   # values printed in the cells
        frame = chart.bounding_box()
        title = chart.locator(".gtitle").first.bounding_box()
        assert frame["x"] <= title["x"] and title["x"] + title["width"] <= frame["x"] + frame["width"], (title, frame)
        assert frame["y"] <= title["y"], (title, frame)
        plot = chart.locator(".nsewdrag").first.bounding_box()
        for fx, fy in ((0.5, 0.5), (0.12, 0.15), (0.88, 0.85)):   # the centre and near two corners of cell (1, 1)
            page.mouse.move(plot["x"] + (1 + fx) / len(z[0]) * plot["width"],
                            plot["y"] + (1 + fy) / len(z) * plot["height"])
            label = chart.locator(".hoverlayer .hovertext").first
            label.wait_for(timeout=5000)
            text = label.text_content()
            value = re.search(r"layer 1, head 1: ([-+.\de]+)", text)
            assert value and float(value.group(1)) == pytest.approx(z[1][1], rel=1e-3), (fx, fy, text, z[1][1])
        toolbars = [chart.locator(".modebar").first] + page.locator("[data-testid='stElementToolbar']").all()
        for bar in toolbars:
            if bar.count() and bar.is_visible():
                assert not _overlap(bar.bounding_box(), title), (bar.bounding_box(), title)

    page.get_by_text("fixed 0–1", exact=True).click()
    idle(page)
    gd = page.locator("[data-testid='stPlotlyChart'] .js-plotly-plot").first
    assert plotly_value(gd, "gd => [gd.data[0].zmin, gd.data[0].zmax]", until=lambda z: z == [0, 1]) == [0, 1]

    # singular values on a log axis read 1e-5, never SI prefixes (10f, 1p, 100µ)
    spectrum = page.locator("[data-testid='stPlotlyChart']", has_text="Singular spectrum").first
    ticks = spectrum.locator(".ytick text").all_text_contents()
    assert ticks and not any(re.fullmatch(r"[\d.]+\s*[afpnµumkMGT]", t) for t in ticks), ticks

    # κ sits at 1/τ for a state whose rank τ cuts: the plot says which τ
    page.locator("[data-testid='stSelectbox']").filter(has_text="Metric").first.click()
    page.get_by_role("option", name="Condition number (numerical rank)").click()
    idle(page)
    title = page.locator("[data-testid='stPlotlyChart'] .gtitle").first.text_content()
    assert "τ = 0.001" in title and "1/τ = 1000" in title, title

    # explainers render math instead of showing raw R^{dk×dv} and s_m
    page.get_by_text("What am I seeing?").first.click()
    explainer = page.locator("[data-testid='stExpander']").first
    text = explainer.inner_text()
    assert "R^{dk×dv}" not in text and "s_m (m" not in text, text[:300]
    assert explainer.locator("p .katex").count() >= 3
    assert page.external == [], page.external
