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

from browser_timing import dashboard_page, load_words, print_spread
from browser_utils import lab_step_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    with dashboard_page("deltanet-small", "State lab") as page:
        lab_step_seconds(page, 2)  # warm-up: the first steps compile plotly's heatmap path
        load = load_words()
        times = lab_step_seconds(page, args.steps)
    print(f"State lab step in headless chromium, deltanet-small, CPU float32, 1 intra-op thread, {args.steps} steps; "
          f"{load}")
    for i, what in enumerate(("key press → state heatmap redrawn", "key press → run finished (every chart)")):
        print_spread(what, [t[i] for t in times])


if __name__ == "__main__":
    main()
