"""Benchmark: the Prune page's prediction after a typed per-layer ratio, in a real browser (issue 40: ≤ 0.5 s per
typed ratio on gated-deltanet-small).

A fresh dashboard server on gated-deltanet-small (CPU, one intra-op thread, as the browser tests run it, its l1 map
shipped with the sample) and one headless Debian chromium page on the Prune page, plan kind "Per layer"; then
`--steps` typed ratios (layer by layer, cycling through a few values), each timed from the Enter that commits the
ratio until the sentence "Your plan: predicted Δ log perplexity …" shows the new plan's prediction (Playwright,
polled every 10 ms), and until the page's run has finished (every chart redrawn). Prints the host's load average,
then the median, p20–p80 and min–max of both.
Run: .venv/bin/python benchmarks/typed_prediction_browser.py [--steps N]
"""
from __future__ import annotations

import argparse
import re
import time

from browser_timing import dashboard_page, load_words, print_spread
from browser_utils import IDLE, TIMEOUT_MS, idle

SAID = "[...document.querySelectorAll('[data-testid=stMain] p')].map(p => p.innerText)" \
       ".find(t => t.startsWith('Your plan: predicted')) || ''"
VALUES = (0.25, 0.5, 0.75, 0.375)


def typed_seconds(page, steps: int) -> list[tuple[float, float]]:
    main = page.locator("[data-testid='stMain']")
    layers = main.get_by_label(re.compile(r"^ratio ρ, layer \d+$")).count()
    times = []
    for step in range(steps):
        layer, value = step % layers, VALUES[(step // layers + step) % len(VALUES)]
        field = main.get_by_label(f"ratio ρ, layer {layer}", exact=True)
        if float(field.input_value()) == value:
            value = VALUES[(VALUES.index(value) + 1) % len(VALUES)]
        before = page.evaluate(f"() => {SAID}")
        field.fill(str(value))
        start = time.perf_counter()
        field.press("Enter")
        page.wait_for_function(f"b => {{ const t = {SAID}; return t && t !== b; }}", arg=before,
                               timeout=TIMEOUT_MS, polling=10)
        shown = time.perf_counter() - start
        page.wait_for_selector(IDLE, timeout=TIMEOUT_MS)
        times.append((shown, time.perf_counter() - start))
        idle(page)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    with dashboard_page("gated-deltanet-small", "Prune") as page:
        page.wait_for_selector("text=shipped with the sample", timeout=TIMEOUT_MS)
        page.locator("[data-testid='stMain']").get_by_text("Per layer", exact=True).click()
        idle(page)
        typed_seconds(page, 2)  # warm-up
        load = load_words()
        times = typed_seconds(page, args.steps)
    print(f"Typed per-layer ratio → prediction in headless chromium, gated-deltanet-small (shipped l1 map), CPU "
          f"float32, 1 intra-op thread, {args.steps} typed ratios; {load}")
    for i, what in enumerate(("Enter → prediction sentence shows the new plan", "Enter → run finished (every chart)")):
        print_spread(what, [t[i] for t in times])

if __name__ == "__main__":
    main()
