"""Dashboard inputs a user types (issue 11 items 4 and 8, issue 13 items 4 and 12): one sentence, app keeps working."""
from __future__ import annotations

import shutil

import pytest
from streamlit.testing.v1 import AppTest

from helpers.app import APP, assert_clean, charts, one_sentence, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


def test_long_path_emoji_hub_id_and_empty_field_each_get_one_sentence(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    at.text_input(key="w:model_dir").set_value("/tmp/" + "x" * 5000).run()
    assert not at.exception, [e.value for e in at.exception]
    [error] = at.error
    assert "File name too long" in error.value and one_sentence(error.value) and len(error.value) < 400
    at.sidebar.radio(key="w:model_kind").set_value("Hub id").run()
    at.text_input(key="w:hub_id").set_value("\U0001F917/model").run()
    assert not at.exception and len(at.error) == 1
    assert "valid hub id" in at.error[0].value
    assert "offline" not in at.error[0].value and one_sentence(at.error[0].value)
    at.sidebar.radio(key="w:model_kind").set_value("Local directory").run()
    at.text_input(key="w:model_dir").set_value("").run()
    assert_clean(at)
    [info] = [i.value for i in at.info if "No model is selected" in i.value]
    assert "no bundled sample is installed" not in info and "bundled samples under **Bundled sample**" in info
    at.text_input(key="w:model_dir").set_value(str(lm_dir)).run()  # and it still works
    assert_clean(at)
    assert len(charts(at)) == 1


def test_tokens_times_sequences_are_bounded_by_memory(monkeypatch, lm_dir):
    from analysis.models import limits
    monkeypatch.setattr(limits, "available_memory", lambda device="cpu": 16 * 10**9)
    at = start(monkeypatch, lm_dir)  # the Model page computes no states: set the sizes there, then visit States
    at.selectbox(key="w:split").set_value("train")
    at.number_input(key="w:tokens").set_value(8192)
    at.number_input(key="w:sequences").set_value(64).run()
    at.switch_page("pages/states.py").run()
    assert not at.exception and len(at.error) == 1
    message = at.error[0].value
    assert "logits alone 17.2 GB" in message and "8.0 GB one request may use" in message and one_sentence(message)
    assert "in the sidebar" in message


def test_a_broken_bundled_sample_does_not_break_the_dashboard(monkeypatch, lm_dir, tmp_path):
    import analysis.models.load
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{ not json")
    shutil.copytree(lm_dir, tmp_path / "tiny")
    shutil.copytree(lm_dir, tmp_path / ".tiny.partial")
    monkeypatch.setattr(analysis.models.load, "SAMPLES_DIR", tmp_path)
    monkeypatch.delenv("STATE_RANK_DEFAULT_MODEL", raising=False)
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.sidebar.selectbox(key="w:sample").options == ["tiny"]
    assert any("broken" in w.value and "Skipped" in w.value for w in at.sidebar.warning)
    assert not at.error and len(charts(at)) == 1
