"""Issue 22 in a real browser: on the bundled deltanet-small, prune, then a 5-step lora-kd recovery from the Prune
page; the loss curve (CE, KD, total per step, validation perplexity at its checks) and the before/after table
with an "after recovery" column that names the method."""
import re

import pytest

from browser_utils import (ROOT, TIMEOUT_MS, app_server, chromium_page, choose, fill, idle, no_exception,
                           open_page, plotly_value)

pytestmark = pytest.mark.browser

STEPS, VALIDATE_EVERY = 5, 2  # validation at step 0 (the pruned model), 2, 4 and the last step, 5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The dashboard on deltanet-small (the bundled sample: real weights, real text); saved states and models
    go under a temporary output root, never the project's."""
    output = tmp_path_factory.mktemp("recovery-out")
    with app_server(tmp_path_factory, "recovery", ROOT / "sample_models" / "deltanet-small",
                    STATE_RANK_OUTPUT_ROOT=str(output)) as url:
        yield url


def test_a_five_step_lora_kd_recovery_draws_its_loss_curve_and_fills_the_table(server):
    with chromium_page(server) as page:
        idle(page)
        open_page(page, "Prune")
        main = page.locator("[data-testid='stMain']")

        # a data-free prune (no calibration) measured on few tokens without kernel timing: small, fast work
        choose(page, main, "Strategy", "L1 magnitude")
        evaluation = main.locator("[data-testid='stExpander']", has_text="Evaluation settings")
        evaluation.locator("summary").click()
        fill(evaluation.get_by_label("Context (tokens)", exact=True), 128)
        fill(evaluation.get_by_label("Tokens to score", exact=True), 1024)
        evaluation.locator("[data-testid='stCheckbox']", has_text="Time the kernel").click()
        idle(page)
        assert not evaluation.get_by_label("Time the kernel (every layer's key dim)").is_checked()
        assert "In use: context 128, 1,024 tokens to score" in evaluation.inner_text()
        main.get_by_role("button", name="Prune", exact=True).click()
        page.wait_for_selector("h3:has-text('Before and after')", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)

        # the Recovery section: lora-kd, 5 steps of 2 × 64 tokens, rank 8, validation every 2 steps
        page.wait_for_selector("h3:has-text('Recovery fine-tune')", timeout=TIMEOUT_MS)
        choose(page, main, "Method", "LoRA + distillation from the unpruned model")
        for label, value in (("Steps", STEPS), ("Batch (sequences)", 2), ("LoRA rank", 8),
                             ("Validate every (steps)", VALIDATE_EVERY)):
            fill(main.get_by_label(label, exact=True).last, value)  # the last: Recovery's (lm-eval's has a Batch)
        fill(main.get_by_label("Tokens per sequence", exact=True).last, 64)  # the first is calibration's
        main.get_by_role("button", name="Run recovery").click()
        page.wait_for_selector("text=/recovery steps \\(final training loss/", timeout=TIMEOUT_MS)
        idle(page)
        no_exception(page)

        # the loss curve: total, CE and KD at each of the 5 steps; validation perplexity at its checks
        curve = main.locator("[data-testid='stPlotlyChart']", has_text="Recovery: training loss per step").last
        curve = curve.locator(".js-plotly-plot")
        traces = plotly_value(curve, "gd => gd.data.map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))",
                              until=lambda v: len(v) == 4, timeout_ms=60_000)
        by_name = {t["name"]: t for t in traces}
        assert set(by_name) == {"total loss (nats/token)", "cross-entropy", "KD term (KL·T²)",
                                "validation perplexity"}
        for name in ("total loss (nats/token)", "cross-entropy", "KD term (KL·T²)"):
            assert by_name[name]["x"] == [1, 2, 3, 4, 5], name
            assert all(isinstance(y, (int, float)) and y >= 0 for y in by_name[name]["y"]), by_name[name]
        # the total is CE + weight 1 × KD (float32 losses summed on the device: 1e-4 relative covers rounding)
        for total, ce, kd in zip(*(by_name[n]["y"] for n in ("total loss (nats/token)", "cross-entropy",
                                                               "KD term (KL·T²)"))):
            assert total == pytest.approx(ce + kd, rel=1e-4)
        validation = by_name["validation perplexity"]
        assert validation["x"] == [0, 2, 4, 5] and all(y > 1 for y in validation["y"]), validation

        # the before/after table: an "after recovery" column with a perplexity, and the method named
        table = main.locator("[data-testid='stTable']").filter(has_text="after recovery").last
        head = [c.inner_text().strip() for c in table.locator("thead th").all()]
        assert head[-3:] == ["after recovery", "Δ after recovery", "% after recovery"], head
        rows = {r.locator("th").first.inner_text().strip(): [c.inner_text().strip() for c in r.locator("td").all()]
                for r in table.locator("tbody tr").all()}
        recovered = head.index("after recovery") - 1  # td cells after the row's header cell
        assert rows["method"][recovered].startswith("lora-kd (LoRA + distillation"), rows["method"]
        assert f"{STEPS} steps" in rows["method"][recovered]
        ppl_row = next(r for r in rows if r.startswith("perplexity (") and "context 128" in r and "1,024 tokens" in r)
        assert re.fullmatch(r"\d+\.\d{3}", rows[ppl_row][recovered]), rows[ppl_row]
        assert float(rows[ppl_row][recovered]) > 1
