"""Helpers for the dashboard tests under streamlit.testing.v1.AppTest (start the app, open a page, click, read charts).

Fixtures (lm_dir, recall_dir, navigation_only, sweep_cache, one_torch_thread) live in conftest.py."""
from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")  # tests/helpers/ -> the repository root
PAGES = {"pages/model.py": "Model", "pages/states.py": "States & rank", "pages/query_noise.py": "Query noise",
         "pages/state_lab.py": "State lab", "pages/importance.py": "Channel importance", "pages/prune.py": "Prune",
         "pages/sweep.py": "Sweep & latency"}

# calibration and evaluation settings small enough for a busy 2-core box
SMALL = {"calib_sequences": 2, "calib_tokens": 64, "eval_context": 64, "eval_tokens": 256}


def start(monkeypatch, model_dir) -> AppTest:
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(model_dir))
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def one_sentence(message: str) -> bool:
    return message.endswith(".") and ". " not in message.rstrip(".") and "\n" not in message


def assert_clean(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def open_page(monkeypatch, model_dir, page: str) -> AppTest:
    """The app on `page`, with calibration and evaluation settings small enough for a busy 2-core box."""
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(model_dir))
    at = AppTest.from_file(APP, default_timeout=180)
    for name, value in SMALL.items():
        at.session_state[name] = value
    at.run()
    at.switch_page(page).run()
    clean(at)
    return at


def click(at, key: str) -> AppTest:
    at.button(key=key).click().run()
    clean(at)
    return at


def sweep_page(monkeypatch, lm_dir) -> AppTest:
    at = open_page(monkeypatch, lm_dir, "pages/sweep.py")
    at.multiselect(key="w:sweep_strategies").set_value(["random", "l1"])
    at.text_input(key="w:sweep_ratios").set_value("0.5").run()
    clean(at)
    return at


def sweep_points(at) -> dict:
    [spec] = [s for s in charts(at) if s["layout"]["title"]["text"] == "Perplexity vs pruning ratio"]
    return {t["name"]: t["x"] for t in spec["data"]}, spec


def sensitivity_page(monkeypatch, lm_dir):
    """The Prune page with its sensitivity section set to L1 at 0.25 and 0.75, scored on 256 tokens."""
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("l1").run()
    at.text_input(key="w:sens_ratios").set_value("0.25, 0.75").run()
    at.number_input(key="w:sens_eval_tokens").set_value(256).run()
    return at


def sensitivity_map(at):
    """The z grid (layer × ratio) of the sensitivity map chart."""
    [spec] = [s for s in charts(at) if "each layer alone" in s["layout"]["title"]["text"]]
    return spec["data"][0]["z"]
