"""Timings carry repeats and spread: statistics against numpy, an injected fake clock, threads, the CLI's JSON."""
import json

import numpy as np
import pytest
import torch

from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.evaluate.latency import NOISY_SPREAD, kernel_latency, summary, time_call, timing_stats
from family_cases.text_lm import build_tiny

SAMPLES = [[5.0], [3.0, 1.0], [12.0, 11.0, 13.0, 12.5, 55.0, 11.8, 12.1], list(np.linspace(1.0, 2.0, 10) ** 2)]


@pytest.mark.parametrize("samples", SAMPLES)
def test_statistics_match_numpy(samples):
    stats = timing_stats(samples)
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    assert stats["median_ms"] == pytest.approx(median)
    assert stats["spread"]["q1_ms"] == pytest.approx(q1) and stats["spread"]["q3_ms"] == pytest.approx(q3)
    assert stats["spread"]["iqr_ms"] == pytest.approx(q3 - q1)
    assert stats["spread"]["min_ms"] == min(samples) and stats["spread"]["max_ms"] == max(samples)
    assert stats["repeats"] == len(samples)
    assert stats["noisy"] == ((q3 - q1) / median > NOISY_SPREAD)


def test_one_outlier_does_not_move_the_median_but_a_wide_spread_is_flagged():
    steady = timing_stats([10.0, 10.2, 9.9, 10.1, 100.0])
    assert steady["median_ms"] == 10.1 and not steady["noisy"] and steady["spread"]["max_ms"] == 100.0
    scattered = timing_stats([966.0, 1100.0, 115.0, 12.0])  # the dk 64 runs
    assert scattered["noisy"] and scattered["spread"]["iqr_over_median"] > 1


class FakeClock:
    """perf_counter stand-in: each call advances by the next scripted step (seconds)."""
    def __init__(self, durations_s):
        self.now, self.steps = 0.0, []
        for d in durations_s:
            self.steps += [0.0, d]  # start read, then the end read `d` later

    def __call__(self):
        self.now += self.steps.pop(0)
        return self.now


def test_time_call_reports_the_injected_durations():
    durations_ms = [4.0, 5.0, 4.5, 30.0, 4.2, 4.8]
    clock = FakeClock([d / 1e3 for d in durations_ms])
    calls = []
    stats = time_call(lambda: calls.append(1), "cpu", threads=1, repeats=6, warmup=0, number=1, clock=clock)
    assert len(calls) == 6 and stats["repeats"] == 6 and stats["threads"] == 1
    assert stats["median_ms"] == pytest.approx(np.median(durations_ms))
    q1, q3 = np.percentile(durations_ms, [25, 75])
    assert stats["spread"]["iqr_ms"] == pytest.approx(q3 - q1)
    assert "1 CPU thread" in stats["timer"] and "median of 6" in stats["timer"]


def test_time_call_uses_the_stated_threads_and_restores_them():
    before, seen = torch.get_num_threads(), []
    stats = time_call(lambda: seen.append(torch.get_num_threads()), "cpu", threads=1, repeats=3, warmup=1, number=1)
    assert set(seen) == {1} and stats["threads"] == 1 and torch.get_num_threads() == before
    with pytest.raises(AnalysisError, match="Repeats must lie"):
        time_call(lambda: None, "cpu", repeats=10_000)


def test_kernel_points_carry_median_spread_repeats_threads():
    [point] = kernel_latency([16], batch=1, tokens=64, heads=2, value_dim=16, repeats=5)
    assert point["threads"] == 1 and point["repeats"] >= 5 and point["ms"] == point["median_ms"]
    assert point["spread"]["min_ms"] <= point["median_ms"] <= point["spread"]["max_ms"]
    assert "ms median (IQR" in summary(point) and "1 thread" in summary(point)


def test_cli_latency_json_has_median_spread_repeats_threads_noisy(tmp_path, capsys):
    build_tiny("delta_net").save_pretrained(tmp_path / "m")
    assert main(["latency", str(tmp_path / "m"), "--key-dims", "8,16", "--batch", "1", "--tokens", "32",
                 "--repeats", "5", "--json", "-", "--device", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    for point in report["kernel"] + [report["model_forward"]]:
        assert {"median_ms", "spread", "repeats", "threads", "noisy"} <= set(point)
        assert {"iqr_ms", "min_ms", "max_ms"} <= set(point["spread"])
        assert point["repeats"] >= 5 and point["threads"] == 1 and isinstance(point["noisy"], bool)
    assert [p["key_dim"] for p in report["kernel"]] == [8, 16]
