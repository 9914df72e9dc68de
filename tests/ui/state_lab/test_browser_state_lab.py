"""The State lab in a real browser on deltanet-small: type a sentence, scrub, switch the rule, move the SNR."""
import pytest

from browser_utils import ARTIFACTS, ROOT, TIMEOUT_MS, app_server, chromium_page, full_screenshot, idle, \
    lab_step_seconds, no_exception, open_page, plotly_value, shown_choice

pytestmark = pytest.mark.browser
MODEL = ROOT / "sample_models" / "deltanet-small"
Z = "gd => gd.data[0].z.map(row => row.slice(0, 16).join(',')).join(';')"
Y = "gd => gd.data.map(t => t.name + ':' + (t.y || []).join(',')).join('|')"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not (MODEL / "config.json").exists():
        pytest.skip("the bundled sample deltanet-small is not installed")
    with app_server(tmp_path_factory, "state-lab", MODEL.name) as url:
        yield url


def chart(page, key: str):
    return page.locator(f".st-key-{key} .js-plotly-plot").first


def slider(page, label: str):
    return page.locator("[data-testid='stSlider']", has_text=label).get_by_role("slider").first


def press(page, label: str, key: str) -> None:
    slider(page, label).focus()
    slider(page, label).press(key)
    idle(page)
    no_exception(page)


def test_type_scrub_switch_rule_and_snr(server):
    with chromium_page(server) as page:
        page.wait_for_selector("h1:has-text('Model')", timeout=TIMEOUT_MS)
        idle(page)
        open_page(page, "State lab")
        box = page.get_by_label("Text (or edit the prepared one)")
        box.fill("Alice met Bob in Paris. Bob met Carol in Rome. Where did Alice meet Bob? In")
        box.press("Control+Enter")
        idle(page)
        no_exception(page)
        assert page.locator("mark").first.inner_text().strip() == "In"  # the last token is current
        # issue 29: the box names what it holds now, and the probe's token j follows the scrubber
        prepared = page.locator("[data-testid='stSelectbox']", has_text="Prepared sentence")
        assert "(your own text)" in shown_choice(prepared), shown_choice(prepared)
        steps = lab_step_seconds(page, 3)
        print("\nState lab steps (key press → heatmap, → run finished): "
              + ", ".join(f"{a:.2f} s / {b:.2f} s" for a, b in steps))
        scrubber = page.locator("[data-testid='stSlider']", has_text="Token t").get_by_role("slider").first
        token_j = page.locator("[data-testid='stSlider']", has_text="Read the key of token j").get_by_role("slider")
        assert token_j.first.input_value() == scrubber.input_value()
        # the spectrum names τ·s₁ and the numerical rank in its legend: no text drawn over the plot to collide
        legend = plotly_value(chart(page, "lab_spectrum"), "gd => gd.data.map(t => t.name).join('|')")
        assert "τ·s₁ (τ = 0.001)" in legend and "numerical rank" in legend
        assert chart(page, "lab_spectrum").locator(".annotation").count() == 0
        press(page, "Token t", "End")

        last = plotly_value(chart(page, "lab_state"), Z)
        press(page, "Token t", "Home")                                   # back to the first token
        first = plotly_value(chart(page, "lab_state"), Z, until=lambda z: z != last)
        assert first != last
        spectrum_before = plotly_value(chart(page, "lab_spectrum"), Y)
        press(page, "Token t", "End")
        assert plotly_value(chart(page, "lab_spectrum"), Y, until=lambda y: y != spectrum_before) != spectrum_before

        # three rules on one rank chart: plain linear attention's curve is not the model's
        util = plotly_value(chart(page, "lab_rank"), "gd => gd.data.map(t => t.y)")
        assert util[0] != util[2]
        model_spectrum = plotly_value(chart(page, "lab_spectrum"), Y)
        page.locator("[data-testid='stRadio'] label", has_text="plain linear attention").click()
        idle(page)
        no_exception(page)
        assert plotly_value(chart(page, "lab_spectrum"), Y, until=lambda y: y != model_spectrum) != model_spectrum

        error = page.locator("[data-testid='stMetricValue']").first
        before = error.inner_text()
        for _ in range(10):
            slider(page, "SNR (dB)").press("ArrowRight")
        idle(page)
        page.wait_for_function("([el, old]) => el.innerText !== old", arg=[error.element_handle(), before],
                               timeout=TIMEOUT_MS)
        assert float(error.inner_text()) < float(before)                 # less noise, smaller retrieval error
        # play: the scrubber's fragment advances one token per second until paused
        current = page.locator("mark").first.inner_text()
        page.get_by_text("Play (one token per second)").click()
        page.wait_for_function("old => document.querySelector('mark') && document.querySelector('mark').innerText !== old",
                               arg=current, timeout=20_000)
        page.get_by_text("Play (one token per second)").click()
        idle(page)
        no_exception(page)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        full_screenshot(page, ARTIFACTS / "state_lab.png")
