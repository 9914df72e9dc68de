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
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from browser_utils import (CHROMIUM, CHROMIUM_ARGS, IDLE, TIMEOUT_MS, idle, open_page,  # noqa: E402
                           streamlit_server)

SAID = "[...document.querySelectorAll('[data-testid=stMain] p')].map(p => p.innerText)" \
       ".find(t => t.startsWith('Your plan: predicted')) || ''"
VALUES = (0.25, 0.5, 0.75, 0.375)


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


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
    from playwright.sync_api import sync_playwright
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(ROOT / "sample_models" / "gated-deltanet-small"),
           "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp, streamlit_server(env, Path(tmp) / "server.log") as url, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(url, timeout=TIMEOUT_MS)
        idle(page)
        open_page(page, "Prune")
        page.wait_for_selector("text=shipped with the sample", timeout=TIMEOUT_MS)
        page.locator("[data-testid='stMain']").get_by_text("Per layer", exact=True).click()
        idle(page)
        typed_seconds(page, 2)  # warm-up
        load = os.getloadavg()
        times = typed_seconds(page, args.steps)
        browser.close()
    print(f"Typed per-layer ratio → prediction in headless chromium, gated-deltanet-small (shipped l1 map), CPU "
          f"float32, 1 intra-op thread, {args.steps} typed ratios; load average before: {load[0]:.1f} (1 min), "
          f"{load[1]:.1f} (5 min) on {os.cpu_count()} cores")
    for i, what in enumerate(("Enter → prediction sentence shows the new plan", "Enter → run finished (every chart)")):
        xs = [t[i] for t in times]
        print(f"{what}: median {statistics.median(xs):.2f} s, p20–p80 {quantile(xs, 0.2):.2f}–{quantile(xs, 0.8):.2f} "
              f"s, min–max {min(xs):.2f}–{max(xs):.2f} s")


if __name__ == "__main__":
    main()
