"""Issue 29 items 6 and 9 under AppTest: every page speaks the loaded family's words (the tiny Nemotron-H is
Mamba-2's SSD: q = C, k = B, v = dt·x, no normalisation, no readout scale) and hides the control it lacks; the
per-layer inputs of a hybrid name the block; the Save name belongs to the model it was typed for; "Start here" lists
the pages in the sidebar's order; Channel importance draws the data-free strategies before any calibration. (The
Prune page opening on the strategy whose map ships is checked in a real browser: tests/ui/prune/
test_browser_plans_by_eye.py.)"""
import pytest
import streamlit as st

from helpers.app import SMALL, assert_clean, click, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


def explained(at) -> str:
    [box] = [e for e in at.expander if e.label == "What am I seeing?"]
    return " ".join([m.value for m in box.markdown] + [x.value for x in box.latex])


def test_a_mamba2_hybrid_is_explained_in_its_own_words_and_offers_no_readout_scale(monkeypatch, nemotron_dir):
    at = start(monkeypatch, nemotron_dir)
    model = explained(at)
    assert "q = C, k = B, v = dt·x" in model and "without normalisation" in model
    assert r"\beta_t k_t k_t^\top" not in model and r"\mathrm{scale}" not in model and r"o_t = S_t^\top q_t" in model

    at.switch_page("pages/query_noise.py").run()
    assert_clean(at)
    noise = explained(at)
    assert "takes the query as it is (no l2 norm)" in noise and "re-normalises the query to unit length" not in noise

    at.switch_page("pages/state_lab.py").run()
    assert_clean(at)
    lab = explained(at)
    assert "q = C, k = B" in lab and r"o_t = S_t^\top q_t" in lab
    pruned = [c.value for c in at.caption if "channels zeroed after the convolution" in c.value]
    assert pruned and "keys not re-normalised" in pruned[0] and "no readout scale" in pruned[0]
    assert "keys re-normalised" not in pruned[0] and "readout scale unchanged" not in pruned[0]
    assert {m.label for m in at.metric} >= {"Monte Carlo, re-normalised q̂ (comparison only)",
                                            "second-order prediction, q̂ (comparison only)"}

    # the readout choice made earlier on a model that has a readout scale; per-layer ratios; a data-free strategy
    for name, value in {**SMALL, "prune_latency": False, "prune_rescale": "default", "prune_mode": "Per layer",
                        "prune_strategy": "l1"}.items():
        at.session_state[name] = value
    at.switch_page("pages/prune.py").run()
    assert_clean(at)
    assert not [r for r in at.radio if r.label == "Readout scale"]
    assert "has no scale" in explained(at)
    labels = [n.label for n in at.number_input if n.label.startswith("ratio ρ")]
    assert labels == ["ratio ρ, layer 0 (block 0)", "ratio ρ, layer 1 (block 2)"]  # "M*M-": Mamba, attn, Mamba, MLP
    click(at, "prune_run")
    notes = " ".join(c.value for c in at.caption)
    assert "no readout scale in this family" in notes and "1/√dₖ′" not in notes and "1/√dₖ (" not in notes


def test_the_save_name_stays_with_the_model_it_was_typed_for(monkeypatch, lm_dir, tmp_path):
    from ui_fixtures import save_tiny_lm
    other = save_tiny_lm(tmp_path / "other-lm", kind="gated_deltanet")
    at = start(monkeypatch, lm_dir)
    # no kernel timing and a data-free strategy: only the names matter here
    for name, value in {**SMALL, "prune_latency": False, "prune_strategy": "l1"}.items():
        at.session_state[name] = value
    at.switch_page("pages/prune.py").run()
    click(at, "prune_run")
    at.text_input(key="w:prune_out").set_value("my-name-for-the-first").run()
    at.text_input(key="w:model_dir").set_value(str(other)).run()
    click(at, "prune_run")
    name = at.text_input(key="w:prune_out").value
    assert name != "my-name-for-the-first" and name.startswith("other-lm-l1-dk")


def test_start_here_lists_the_pages_in_the_sidebars_order(monkeypatch, lm_dir):
    shown = []
    real = st.navigation

    def recording(pages, *args, **kwargs):
        shown[:] = [p.title for group in (pages.values() if isinstance(pages, dict) else [pages]) for p in group]
        return real(pages, *args, **kwargs)
    monkeypatch.setattr(st, "navigation", recording)
    at = start(monkeypatch, lm_dir)
    links = [el.proto.label for el in at.get("page_link")]
    assert len(links) == len(shown) == 7
    assert [label.split(". ", 1)[1].split(":", 1)[0] for label in links] == shown


def test_channel_importance_draws_the_data_free_strategies_before_any_calibration(monkeypatch, lm_dir):
    """Item 8: the first chart does not wait for the calibration (here: a calibration that fails, as a slow one
    would keep the page waiting); the data-free strategies' charts are there, then the one-sentence error."""
    from analysis.errors import AnalysisError
    from analysis.shrink import calibration

    def fails(*args, **kwargs):
        raise AnalysisError("The calibration failed on purpose.")
    monkeypatch.setattr(calibration, "calibrate", fails)  # as CalibrationSettings.calibrate calls it
    at = start(monkeypatch, lm_dir)
    at.switch_page("pages/importance.py").run()
    assert not at.exception
    drawn = [el.proto.id for el in at.get("plotly_chart")]
    assert any(i.endswith("-scores_random") for i in drawn) and any(i.endswith("-scores_l1") for i in drawn), drawn
    assert [e.value for e in at.error] == ["The calibration failed on purpose."]
