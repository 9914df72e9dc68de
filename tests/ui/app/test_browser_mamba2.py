"""Issue 21 in a real browser: transformers-saved tiny Nemotron-H and Granite-4.0-H (granitemoehybrid) directories,
opened as "Local directory": the Model page lists their blocks labelled (Mamba-2 mixers, attention, MLP / MoE) with
the implementation line, States & rank draws its chart, and Query noise marks the re-normalised figures as
comparison only (Mamba-2 does not l2-normalise C and B); the State lab, Channel importance, Prune and Sweep pages
render too."""
import pytest

from browser_utils import ARTIFACTS, TIMEOUT_MS, app_server, chromium_page, full_screenshot, idle, no_exception, \
    open_page

pytestmark = pytest.mark.browser


def save_mamba2(path, model_type):
    from analysis.data import corpus as data
    from family_cases.mamba2 import make_model
    model = make_model(model_type)
    model.resize_token_embeddings(len(data.load_tokenizer()), mean_resizing=False)  # read real text
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return {t: save_mamba2(tmp_path_factory.mktemp(t), t) for t in ("nemotron_h", "granitemoehybrid")}


@pytest.fixture(scope="module")
def server(tmp_path_factory, dirs):
    with app_server(tmp_path_factory, "mamba2", dirs["nemotron_h"]) as url:
        yield url


def main_text(page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def check_pages(page, blocks: list[str], layers: int, cls: str) -> None:
    open_page(page, "Model")
    page.locator("[data-testid='stExpander'] summary", has_text="What the kernels will do").click()  # issue 43
    page.wait_for_timeout(300)
    full_screenshot(page, ARTIFACTS / f"model-{cls}.png")
    text = main_text(page)
    assert f"Loaded as transformers' {cls}" in text
    for label in blocks:
        assert label in text, label
    assert f"Each of the {layers} linear layers runs the Mamba-2 SSD scan" in text
    assert "chunked_linear_attention" in text and "linear_attention.py" in text and "on CUDA" in text

    open_page(page, "States & rank")
    page.wait_for_selector("[data-testid='stPlotlyChart'] .main-svg", timeout=TIMEOUT_MS)
    assert page.locator("[data-testid='stPlotlyChart'] .heatmaplayer").count() >= 1

    open_page(page, "Query noise")
    page.wait_for_selector("[data-testid='stPlotlyChart'] .main-svg", timeout=TIMEOUT_MS)
    note = page.locator("[data-testid='stAlert']", has_text="comparison only").first.inner_text()
    assert "does not l2-normalise its queries and keys" in note and "raw query: exact" in note
    legend = page.locator("[data-testid='stPlotlyChart'] .legendtext").all_text_contents()
    renormalised = [t for t in legend if "re-normalised" in t]
    assert renormalised and all(t.endswith("(comparison only)") for t in renormalised), legend
    assert any(t.endswith("raw query: exact") for t in legend), legend
    full_screenshot(page, ARTIFACTS / f"query-noise-{cls}.png")

    for title in ("State lab", "Channel importance", "Prune", "Sweep & latency"):  # every page renders (issue 21)
        open_page(page, title)  # waits for its title, then idle, and fails on any exception shown
        assert "Traceback" not in main_text(page)
    open_page(page, "Channel importance")
    page.wait_for_selector("[data-testid='stPlotlyChart'] .main-svg", timeout=TIMEOUT_MS)


def test_nemotron_h_and_granite_h_directories(server, dirs):
    with chromium_page(server) as page:
        page.wait_for_selector("h1:has-text('Model')", timeout=TIMEOUT_MS)
        idle(page)
        from playwright.sync_api import expect  # polls: the sidebar may still be drawing after the first idle frame
        expect(page.get_by_label("Model directory")).to_have_value(str(dirs["nemotron_h"]), timeout=TIMEOUT_MS)
        check_pages(page, ["Mamba-2 SSD mixer (layer 0)", "softmax attention", "Mamba-2 SSD mixer (layer 1)",
                           "MLP feed-forward, not pruned"], layers=2, cls="NemotronHForCausalLM")

        field = page.get_by_label("Model directory")
        field.fill(str(dirs["granitemoehybrid"]))
        field.press("Enter")
        idle(page)
        no_exception(page)
        check_pages(page, ["Mamba-2 SSD mixer (layer 2) + MoE feed-forward (mixture of experts) + shared MLP (not "
                           "pruned)", "softmax attention + MoE feed-forward"], layers=3, cls="GraniteMoeHybridForCausalLM")
