"""Benchmark: CLI start time, lazy core (now) vs eager imports (how every command started before).

Each run is a fresh `python` process, timed wall-clock from launch to exit, alternating the two so a
busy machine slows both alike. "eager" reproduces the old start: `import analysis` installed the CPU
path for fla (importing torch, fla, transformers) and the parser imported the modules its commands
used; "lazy" is `python -m analysis ...` as it is now. Target: `--help` and `models` ≤ 2 s.
Run: .venv/bin/python benchmarks/start_time.py [--repeats N]   (the last line is `speedup_vs_reference: <x>`)
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EAGER = ("import analysis; analysis.ready(); "
         "import analysis.models.load, analysis.inspect.states, analysis.inspect.report, analysis.shrink.prune, analysis.shrink.sensitivity; "
         "from analysis.cli.main import main; import sys; sys.exit(main({argv!r}))")
COMMANDS = [["--help"], ["models"], ["rank", "--help"]]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    ratios = []
    for argv in COMMANDS:
        lazy_cmd = [sys.executable, "-m", "analysis", *argv]
        eager_cmd = [sys.executable, "-c", EAGER.format(argv=argv)]
        timed(lazy_cmd), timed(eager_cmd)  # warm the file cache for both
        lazy, eager = [], []
        for _ in range(repeats):
            lazy.append(timed(lazy_cmd))
            eager.append(timed(eager_cmd))
        lm, em = statistics.median(lazy), statistics.median(eager)
        ratios.append(em / lm)
        print(f"{' '.join(argv):12s} lazy {lm:6.2f} s [{min(lazy):.2f}–{max(lazy):.2f}]   "
              f"eager {em:6.2f} s [{min(eager):.2f}–{max(eager):.2f}]   ratio {em / lm:5.1f}×   "
              f"({repeats} runs each, median [min–max]; target lazy ≤ 2 s: {'met' if lm <= 2 else 'NOT met'})")
    print(f"speedup_vs_reference: {statistics.median(ratios):.1f}")


if __name__ == "__main__":
    main()
