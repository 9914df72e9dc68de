"""Benchmark: one State lab scrubber step on deltanet-small after the precompute (issue 23 target: ≤ 1 s).

A step is one script run of the page after the token slider moves, under streamlit's AppTest (server side:
slicing the precomputed traces, the noise probe, building and serialising every plotly figure). AppTest reruns
the whole page, while the server reruns only the scrubber's fragment, so this is an upper bound on the server's
share; the browser's plotly redraw comes on top. Texts: the first prepared sentence and a long one
(`--tokens` tokens of the bundled Shakespeare test split, the lab's worst case is 512). One intra-op thread,
as the browser tests run it. Prints the precompute time, then per text the median, p20–p80 and min–max.
Run: .venv/bin/python benchmarks/state_lab_step.py [--steps N] [--tokens T]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    os.environ["STATE_RANK_DEFAULT_MODEL"] = "deltanet-small"
    import torch
    torch.set_num_threads(1)
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.testing.v1 import AppTest

    from analysis.data import corpus as data
    from analysis.models.load import load_tokenizer
    original = PagesManager.__init__

    def init(self, *a, **k):  # pages/ are st.navigation pages, as `streamlit run` treats them after app.py ran
        original(self, *a, **k)
        PagesManager.uses_pages_directory = False
    PagesManager.__init__ = init

    tok = load_tokenizer(ROOT / "sample_models" / "deltanet-small")
    long_text = tok.decode(data.encode(data.load_text("test")[:20_000], tok)[:args.tokens].tolist())
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    at.switch_page("pages/state_lab.py").run()
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, 1 intra-op thread, device cpu, dtype float32")
    for name, text in (("prepared sentence", None), (f"{args.tokens}-token text", long_text)):
        if text is not None:
            start = time.perf_counter()
            at.text_area[0].set_value(text).run()
            print(f"{name}: precompute (forward + 3 rules + spectra + retrieval + pruned l1 0.5) "
                  f"{time.perf_counter() - start:.2f} s")
        assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
        slider = next(s for s in at.slider if s.label.startswith("Token t"))
        T = int(slider.max) + 1
        times = []
        for i in range(args.steps):
            slider = next(s for s in at.slider if s.label.startswith("Token t"))
            start = time.perf_counter()
            slider.set_value((i * 7 + 1) % T).run()
            times.append(time.perf_counter() - start)
            assert not at.exception and not at.error
        print(f"{name} ({T} tokens): one scrubber step median {statistics.median(times):.3f} s, "
              f"p20–p80 {quantile(times, 0.2):.3f}–{quantile(times, 0.8):.3f} s, "
              f"min–max {min(times):.3f}–{max(times):.3f} s over {args.steps} steps (target ≤ 1 s)")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
