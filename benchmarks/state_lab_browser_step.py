"""Benchmark: one State lab scrubber step in a real browser, key press to redrawn state heatmap (issue 29: ≤ 0.5 s).

A fresh dashboard server on deltanet-small (CPU, one intra-op thread, as the browser tests run it) and one headless
Debian chromium page on the State lab, its prepared sentence precomputed; then `--steps` presses of ← on the token
slider, each timed from the key press until the heatmap's title names the new token (Playwright, polled every
10 ms), and the page left to finish its run before the next press. Prints the host's load average, then the
median, p20–p80 and min–max. `benchmarks/state_lab_step.py` times the server's share alone (AppTest).
Run: .venv/bin/python benchmarks/state_lab_browser_step.py [--steps N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from browser_utils import (CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, idle, lab_step_seconds, open_page,  # noqa: E402
                           streamlit_server)


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(ROOT / "sample_models" / "deltanet-small"),
           "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp, streamlit_server(env, Path(tmp) / "server.log") as url, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(url, timeout=TIMEOUT_MS)
        idle(page)
        open_page(page, "State lab")
        lab_step_seconds(page, 2)  # warm-up: the first steps compile plotly's heatmap path
        load = os.getloadavg()
        times = lab_step_seconds(page, args.steps)
        browser.close()
    print(f"State lab step in headless chromium, deltanet-small, CPU float32, 1 intra-op thread, {args.steps} steps; "
          f"load average before: {load[0]:.1f} (1 min), {load[1]:.1f} (5 min) on {os.cpu_count()} cores")
    for i, what in enumerate(("key press → state heatmap redrawn", "key press → run finished (every chart)")):
        xs = [t[i] for t in times]
        print(f"{what}: median {statistics.median(xs):.2f} s, p20–p80 {quantile(xs, 0.2):.2f}–{quantile(xs, 0.8):.2f} "
              f"s, min–max {min(xs):.2f}–{max(xs):.2f} s")

if __name__ == "__main__":
    main()
