"""The dashboard under streamlit.testing.v1.AppTest, on tiny random-init models saved in a tmp dir."""
import pytest
from streamlit.testing.v1 import AppTest

from helpers.app import APP, PAGES, assert_clean, charts, one_sentence, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


def test_first_open_shows_the_default_model_with_a_chart(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    assert_clean(at)
    assert at.title[0].value == "Model"
    # issue 43: the first screen says what the tool is for, in one sentence, before anything else; the kernels'
    # details wait behind an expander
    from ui.shared.navigation import PURPOSE
    assert at.main.markdown[0].value == PURPOSE and one_sentence(PURPOSE) and "prunes" in PURPOSE
    [kernels] = [e for e in at.expander if e.label.startswith("What the kernels will do")]
    assert any(m.value.startswith("- Key tiles of 64 rows per head") for m in kernels.markdown)
    assert at.text_input(key="w:model_dir").value == str(lm_dir)
    [spec] = charts(at)
    assert spec["data"][0]["type"] == "bar" and spec["layout"]["xaxis"]["title"]["text"] == "layer"
    table = at.table[0].value
    assert table.loc["Layers", "Value"] == "2" and table.loc["dtype", "Value"] == "float32"
    assert any("device cpu" in c.value for c in at.caption)
    assert at.expander[0].label == "What am I seeing?"


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders(monkeypatch, lm_dir, page):
    at = start(monkeypatch, lm_dir)
    at.switch_page(page).run()
    assert_clean(at)
    assert at.title[0].value == PAGES[page]
    assert at.expander[0].label == "What am I seeing?"
    if page == "pages/states.py":
        specs = charts(at)
        assert [s["data"][0]["type"] for s in specs] == ["heatmap", "scatter", "scatter"]
        assert at.selectbox(key="w:metric").value == "effective_rank"   # the headline rank (issue 43)
        assert "Shakespeare" in at.caption[0].value and "256 tokens × 4 sequences" in at.caption[0].value
    if page == "pages/model.py":  # the key-dim bars' Notice, from the dks the page shows
        from analysis.models.load import TILE_ROWS
        from ui.shared import notice
        dks = [int(d) for d in at.table[0].value.loc["dk per head, by layer", "Value"].split(", ")]
        assert [c.value for c in at.caption if c.value.startswith("Notice:")] == [notice.key_dims(dks, TILE_ROWS)]
    if page == "pages/query_noise.py":  # more in tests/ui/query_noise/test_app_noise.py
        [spec] = charts(at)
        assert spec["layout"]["yaxis"]["type"] == "log"
        assert len(spec["data"]) == 9  # 3 probes × (raw exact, re-normalised 2nd and 1st order); no Monte Carlo yet
        tables = [d for d in at.dataframe if "measure" not in d.value.columns]  # not the head's rank card
        assert len(tables) == 2  # closed-form figures, predictions with their validity


def test_states_metric_choice_click_free_drill_in_and_random_init(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    at.switch_page("pages/states.py").run()
    at.selectbox(key="w:metric").set_value("stable_rank").run()   # not the default (effective rank)
    at.selectbox(key="w:sel_layer").set_value(1).run()
    at.toggle(key="w:compare_random").set_value(True).run()
    assert_clean(at)
    specs = charts(at)
    assert [s["data"][0]["type"] for s in specs] == ["heatmap", "heatmap", "scatter", "scatter"]
    assert "Stable rank" in specs[0]["layout"]["title"]["text"]
    # a bare local directory may hold random-init weights: never titled "(trained)" beside the random-init copy
    assert "(trained)" not in specs[0]["layout"]["title"]["text"]
    assert "loaded weights" in specs[0]["layout"]["title"]["text"].replace("<br>", " ")
    band = [y for y in specs[2]["data"][0]["y"] if y is not None]
    assert min(band) >= 0  # ±1 std bands never below a rank's floor
    assert "layer 1, head 0" in specs[2]["layout"]["title"]["text"]
    assert any("random init" in t["name"] for t in specs[2]["data"])
    # the choices survive a trip to another page and back
    at.switch_page("pages/model.py").run()
    at.switch_page("pages/states.py").run()
    assert at.selectbox(key="w:metric").value == "stable_rank" and at.selectbox(key="w:sel_layer").value == 1


def test_states_rank_utilization_after_every_token(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    at.switch_page("pages/states.py").run()
    at.selectbox(key="w:metric").set_value("rank_utilization").run()   # the every-token toggle belongs to it
    strided = next(s for s in charts(at) if "layer 0, head 0" in s["layout"]["title"]["text"])
    at.toggle(key="w:every_token").set_value(True).run()
    assert_clean(at)
    dense = next(s for s in charts(at) if "layer 0, head 0" in s["layout"]["title"]["text"])
    x_strided, y_strided = strided["data"][-1]["x"], strided["data"][-1]["y"]
    x_dense, y_dense = dense["data"][-1]["x"], dense["data"][-1]["y"]
    assert x_dense == list(range(len(x_dense))) and len(x_dense) > len(x_strided)
    for x, y in zip(x_strided, y_strided):  # the tracked trace meets the SVD trace at the strided positions
        assert abs(y_dense[x] - y) < 1e-4
    assert any("after every token" in c.value for c in at.caption)


def test_bad_model_choices_show_one_sentence_and_recover(monkeypatch, lm_dir, tmp_path):
    at = start(monkeypatch, lm_dir)
    at.text_input(key="w:model_dir").set_value(str(tmp_path / "nowhere")).run()
    assert not at.exception and len(at.error) == 1 and one_sentence(at.error[0].value)
    assert "nowhere" in at.error[0].value
    empty = tmp_path / "empty"
    empty.mkdir()
    at.text_input(key="w:model_dir").set_value(str(empty)).run()
    assert len(at.error) == 1 and "config.json" in at.error[0].value and one_sentence(at.error[0].value)
    assert at.sidebar.radio(key="w:model_kind").value == "Local directory"  # the app is still there
    at.text_input(key="w:model_dir").set_value(str(lm_dir)).run()
    assert_clean(at)
    assert len(charts(at)) == 1


def test_a_short_pasted_sentence_is_read_whole_and_its_tokens_label_the_positions(monkeypatch, lm_dir):
    """Issue 23 item 5: a short sentence no longer fails until two fields are changed; the sequence settings
    fit the text (a caption says so), and the positions are labelled with their tokens."""
    at = start(monkeypatch, lm_dir)
    at.switch_page("pages/states.py").run()
    at.radio(key="w:text_kind").set_value("Pasted text").run()
    at.text_area(key="w:pasted_text").set_value("To be, or not to be.").run()
    assert_clean(at)
    [fit] = [c.value for c in at.sidebar.caption if "fewer than the 4 × 256" in c.value]
    n = int(fit.split("has ")[1].split(" tokens")[0])
    assert f"read as 1 sequence of {n} tokens" in fit
    assert "pasted text" in at.caption[0].value and f"context {n} tokens × 1 sequences" in at.caption[0].value
    at.number_input(key="w:stride").set_value(1).run()
    over = next(s for s in charts(at) if "layer 0, head 0" in s["layout"]["title"]["text"])
    ticks = over["layout"]["xaxis"]["ticktext"]
    assert len(ticks) == n and ticks[1].endswith(" be")  # position 1 is the token " be"
    assert "%{text}" in over["data"][1]["hovertemplate"]


def test_recall_model_reads_recall_sequences(monkeypatch, recall_dir):
    at = start(monkeypatch, recall_dir)
    assert any("recall model" in i.value for i in at.sidebar.info)
    assert not at.sidebar.get("text_area")
    at.switch_page("pages/states.py").run()
    assert_clean(at)
    assert "synthetic recall sequences" in at.caption[0].value
    at.switch_page("pages/query_noise.py").run()
    assert_clean(at)
    assert len(charts(at)) == 1 and at.button(key="recall_noise_run")  # the recall curve runs on a click


def test_legacy_pages_mode_still_renders_inside_the_frame(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    at.switch_page("pages/states.py").run()
    assert_clean(at)
    assert at.title[0].value == "States & rank" and len(charts(at)) == 3
    assert at.sidebar.radio(key="w:model_kind").value == "Local directory"  # the sidebar came with it


def test_no_model_at_all_explains_how_to_pick_one(monkeypatch, tmp_path):
    import analysis.models.load
    monkeypatch.setattr(analysis.models.load, "SAMPLES_DIR", tmp_path)  # no bundled samples
    monkeypatch.delenv("STATE_RANK_DEFAULT_MODEL", raising=False)
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert_clean(at)
    assert any("No model is selected" in i.value and "Local directory" in i.value for i in at.info)
    assert at.text_input(key="w:model_dir").value == ""


def test_states_spectrum_positions_follow_a_new_stride(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    at.switch_page("pages/states.py").run()
    before = list(at.multiselect(key="w:spectrum_positions").value)
    at.number_input(key="w:stride").set_value(10).run()
    assert_clean(at)
    after = list(at.multiselect(key="w:spectrum_positions").value)
    assert len(after) == len(before) and 0 not in after  # none silently dropped, none collapsed to token 0
    assert all(abs(a - b) <= 5 for a, b in zip(after, before))  # the nearest position collected every 10 tokens
    assert any("moved to the nearest collected" in c.value for c in at.caption)
    spectrum = next(s for s in charts(at) if "Singular spectrum" in s["layout"]["title"]["text"])
    assert {t["name"] for t in spectrum["data"]} == {f"after token {p}" for p in after}
    at.multiselect(key="w:spectrum_positions").set_value([]).run()
    assert_clean(at)
    assert not [s for s in charts(at) if "Singular spectrum" in s["layout"]["title"]["text"]]  # no blank axes
    assert any("No spectrum" in i.value for i in at.info)


def test_a_directory_without_a_tokenizer_says_which_one_reads_its_text(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    notes = [c.value for c in at.sidebar.caption if "no tokenizer.json" in c.value]
    assert len(notes) == 1 and "bundled tokenizer (sample_models/tokenizer/" in notes[0]
