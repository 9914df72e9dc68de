"""Benchmark: dashboard server start → first chart, `python -m ui.shared.launch` vs `streamlit run app.py`.

The launcher ("warm") imports torch, transformers and fla before the server listens; `streamlit run` ("cold")
imports them when the first page runs. Each run is a fresh server on deltanet-small (CPU, one intra-op thread,
as the browser tests run it) and a new page in one headless Debian chromium kept open; the two launches
alternate so a busy machine slows both alike. Two arrivals:
"at once" opens the page as soon as the server answers its health check (what tests/ui/app/test_browser.py times);
"after N s" opens it N seconds after the start, like a user who runs `make run` and then opens the browser.
The clock runs from the server's launch to the Model page's chart drawn and the script idle.
Target (issue 14): ≤ 15 s at once.
Run: .venv/bin/python benchmarks/first_chart.py [--repeats N] [--arrive-after S]
(the last line is `speedup_vs_reference: <x>`, the cold median over the warm one, at once)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from browser_utils import CHROMIUM, CHROMIUM_ARGS, COLD_LAUNCH, LAUNCH, settle, streamlit_server  # noqa: E402

def first_chart(launch: tuple[str, ...], arrive_after: float, browser, log: Path) -> float:
    env = {**os.environ, "STATE_RANK_DEFAULT_MODEL": str(ROOT / "sample_models" / "deltanet-small"),
           "OMP_NUM_THREADS": "1"}
    start = time.time()
    with streamlit_server(env, log, launch) as url:
        time.sleep(max(0.0, start + arrive_after - time.time()))
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        try:
            page.goto(url, timeout=240_000)
            return settle(page, "Model", chart=True) - start
        finally:
            page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arrive-after", type=float, default=10.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright
    launches = {"warm (python -m ui.shared.launch)": LAUNCH, "cold (streamlit run app.py)": COLD_LAUNCH}
    arrivals = {"at once": 0.0, f"after {args.arrive_after:g} s": args.arrive_after}
    times = {(l, a): [] for l in launches for a in arrivals}
    with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for _ in range(args.repeats):
            for arrival, delay in arrivals.items():
                for name, launch in launches.items():
                    times[name, arrival].append(first_chart(launch, delay, browser, Path(tmp) / "server.log"))
        browser.close()
    print(f"server start → first chart, deltanet-small, CPU float32, 1 intra-op thread, {args.repeats} runs each "
          "(median [min–max])")
    for (name, arrival), ts in times.items():
        note = ""
        if arrival != "at once":
            note = f"   ({statistics.median(ts) - arrivals[arrival]:.1f} s after the browser opened the page)"
        print(f"  {name:28s} {arrival:12s} {statistics.median(ts):5.1f} s [{min(ts):.1f}–{max(ts):.1f}]{note}")
    warm, cold = (statistics.median(times[name, "at once"]) for name in launches)
    print(f"target ≤ 15 s at once: {'met' if warm <= 15 else 'NOT met'} ({warm:.1f} s)")
    print(f"speedup_vs_reference: {cold / warm:.2f}")


if __name__ == "__main__":
    main()
