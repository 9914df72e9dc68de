"""Issue 13 under AppTest: emptied multiselects stay empty (every page using ui.shared.state), "All" refills them."""
import pytest

from helpers.app import clean, open_page

pytestmark = pytest.mark.usefixtures("one_torch_thread", "sweep_cache")


def test_an_emptied_multiselect_stays_empty_and_all_refills_it(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/importance.py")
    key = "w:importance_strategies"
    assert len(at.multiselect(key=key).value) == 6
    at.multiselect(key=key).set_value([]).run()
    clean(at)
    assert at.multiselect(key=key).value == []
    assert any("No strategy picked" in c.value for c in at.caption)
    assert not any(s.value.startswith("Scores") for s in at.subheader)
    at.run()
    assert at.multiselect(key=key).value == []          # a rerun does not refill it
    at.button(key="all:importance_strategies").click().run()
    clean(at)
    assert len(at.multiselect(key=key).value) == 6

    at.switch_page("pages/sweep.py").run()              # the sweep's strategies go through the same helper
    at.multiselect(key="w:sweep_strategies").set_value([]).run()
    at.run()
    assert at.multiselect(key="w:sweep_strategies").value == []
