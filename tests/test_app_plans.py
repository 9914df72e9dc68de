"""Issue 20's dashboard defects on the Prune page (AppTest, tiny random-init models): per-model plans,
Save names and writes the model the user picked."""
import json

import pytest
from streamlit.testing.v1 import AppTest

from analysis.io import point_cache
from test_app import APP, lm_dir  # noqa: F401  (fixture)
from ui_fixtures import one_torch_thread, save_tiny_lm  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"calib_sequences": 2, "calib_tokens": 64, "eval_context": 64, "eval_tokens": 256}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "sweeps")


@pytest.fixture(scope="module")
def other_dir(tmp_path_factory):
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-gdn"), "gated_deltanet")


def prune_page(monkeypatch, model_dir) -> AppTest:
    monkeypatch.setenv("STATE_RANK_DEFAULT_MODEL", str(model_dir))
    at = AppTest.from_file(APP, default_timeout=180)
    for name, value in SMALL.items():
        at.session_state[name] = value
    at.run()
    at.switch_page("pages/prune.py").run()
    ok(at)
    return at


def ok(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def ratios(at) -> list:
    return [at.number_input(key=f"w:layer_ratio_{i}").value for i in range(2)]


def test_per_layer_ratios_belong_to_their_model(monkeypatch, lm_dir, other_dir):
    """Another model never shows (or prunes with) the plan typed for the first; coming back restores it."""
    at = prune_page(monkeypatch, lm_dir)
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    at.number_input(key="w:layer_ratio_0").set_value(0.25)
    at.number_input(key="w:layer_ratio_1").set_value(0.75).run()
    ok(at)
    assert ratios(at) == [0.25, 0.75]
    at.text_input(key="w:model_dir").set_value(str(other_dir)).run()
    ok(at)
    assert ratios(at) == [0.5, 0.5]
    assert at.table[0].value["ρ"].tolist() == [0.5, 0.5]  # the plan Prune would apply
    at.text_input(key="w:model_dir").set_value(str(lm_dir)).run()
    ok(at)
    assert ratios(at) == [0.25, 0.75]
