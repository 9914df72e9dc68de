"""Issue 23 under AppTest: the State lab page on the bundled deltanet-small, and every page's formulas."""
import json
import re

import pytest

from helpers.app import PAGES, start
from ui_fixtures import save_tiny_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")
LAB = "pages/state_lab.py"


def chart(at, key: str) -> dict:
    return next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if json.loads(c.proto.spec) and
                key in c.proto.id)


def heatmap(at) -> list:
    return chart(at, "lab_state")["data"][0]["z"]


def scrubber(at):
    return next(s for s in at.slider if s.label.startswith("Token t"))


def clean(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


@pytest.fixture
def lab_page(monkeypatch):
    at = start(monkeypatch, "deltanet-small")
    at.switch_page(LAB).run()
    clean(at)
    return at


def test_state_lab_opens_on_deltanet_small_and_the_scrubber_moves_the_state(lab_page):
    at = lab_page
    assert at.title[0].value == "State lab"
    assert any("deltanet-small" in c.value and "layer 0, head 0" in c.value and "device cpu" in c.value
               and "dtype float32" in c.value for c in at.caption)
    before = heatmap(at)
    assert len(before) == 64 and len(before[0]) == 64  # S_t is dk × dv, K-first
    scrubber(at).set_value(3).run()
    clean(at)
    after = heatmap(at)
    assert max(abs(a - b) for ra, rb in zip(before, after) for a, b in zip(ra, rb)) > 1e-6
    assert "<mark>" in next(m.value for m in at.markdown if "<mark>" in m.value)
    # the rank curves of the three rules are on one chart; the plain linear-attention one differs
    util = {d["name"]: d["y"] for d in chart(at, "lab_rank")["data"]}   # effective rank, the headline (issue 43)
    assert set(util) == set(["the model's own rule", "delta rule, no gate", "plain linear attention"])
    assert util["plain linear attention"] != util["the model's own rule"]


def test_state_lab_rule_switch_snr_and_synthetic_mode(lab_page):
    at = lab_page
    z = heatmap(at)
    at.radio(key="w:lab_rule").set_value("linear").run()
    clean(at)
    assert heatmap(at) != z
    snr = next(s for s in at.slider if s.label == "SNR (dB)")
    first = at.metric[0].value
    snr.set_value(30).run()
    assert at.metric[0].value != first
    at.radio(key="w:lab_mode").set_value("synthetic").run()
    clean(at)
    assert len(heatmap(at)) == 6  # dk = dv = 6 by default
    assert any("synthetic: orthogonal keys" in c.value for c in at.caption)


def test_state_lab_bad_input_is_one_sentence_and_the_page_keeps_working(lab_page):
    at = lab_page
    for text, words in (("", "empty"), ("word " * 10_000, "more than the 512")):
        at.text_area[0].set_value(text).run()
        assert not at.exception
        [error] = at.error
        assert words in error.value and error.value.count(". ") == 0 and error.value.endswith(".")
    at.text_area[0].set_value("The cat sat on the mat.").run()
    clean(at)
    assert len(heatmap(at)) == 64 and scrubber(at).value == scrubber(at).max  # back on the new text's last token


DELTA_UPDATE = re.compile(r"S_t\s*=\s*\(I\s*-\s*\\beta_t\s*k_t\s*k_t\^\\top\)")
WRONG_SIDE = re.compile(r"S_\{t-1\}\s*\\?,?\s*\(I\s*-")  # S_{t−1}(I − βkkᵀ): only type-checks when dk = dv


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-lm-formulas"))


@pytest.mark.parametrize("page", list(PAGES))  # the State lab is one of them
def test_every_page_formula_uses_the_k_first_delta_rule(monkeypatch, tiny_lm, page):
    """Issue 23 item 5: with S ∈ ℝ^{dk×dv} the update is (I − βkkᵀ)S_{t−1} + βkvᵀ and the readout o = Sᵀq."""
    at = start(monkeypatch, tiny_lm)
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    formulas = [el.value for el in at.latex] + [el.value for el in at.markdown]
    assert formulas
    assert not [f for f in formulas if WRONG_SIDE.search(f)]
    if page in ("pages/model.py", LAB):
        assert any(DELTA_UPDATE.search(f) for f in formulas)
        assert any(re.search(r"o_t\s*=\s*\\mathrm\{scale\}\\cdot\s*S_t\^\\top\s*q_t", f) for f in formulas)
    if page == "pages/model.py":
        assert [p.label.split(".")[0] for p in at.get("page_link")] == [str(i) for i in range(1, 8)]


def test_play_advances_one_token_per_run(lab_page):
    at = lab_page
    scrubber(at).set_value(2).run()
    at.toggle(key="lab_play").set_value(True).run()
    clean(at)
    assert scrubber(at).value == 3
    at.toggle(key="lab_play").set_value(False).run()
    assert scrubber(at).value == 3


def test_what_if_dk_were_smaller_shows_the_pruned_head(lab_page):
    at = lab_page
    assert len(chart(at, "lab_pruned_state")["data"][0]["z"]) == 32          # ρ = 0.5 of dk = 64, l1 by default
    next(s for s in at.slider if s.label.startswith("Pruning ratio")).set_value(0.75).run()
    clean(at)
    assert len(chart(at, "lab_pruned_state")["data"][0]["z"]) == 16
    names = [d["name"] for d in chart(at, "lab_pruned_spectrum")["data"]]
    assert names[:3] == ["s_i", "original dk = 64", "τ·s₁ (τ = 0.001)"] and names[3].startswith("numerical rank ")


def test_synthetic_nearly_parallel_keys_interfere_under_linear_attention(lab_page):
    at = lab_page
    at.radio(key="w:lab_mode").set_value("synthetic").run()
    at.selectbox(key="w:lab_pattern").set_value("nearly parallel").run()
    clean(at)
    at.slider(key="w:lab_overlap").set_value(0.5).run()
    clean(at)
    assert any("(c = 0.5)" in c.value for c in at.caption)
    errors = {d["name"]: d["y"] for d in chart(at, "lab_retrieval")["data"]}
    assert sum(errors["plain linear attention"]) > sum(errors["delta rule, no gate"])  # the delta rule corrects


@pytest.mark.parametrize("family, own", [
    ("mamba2", r"S_t = e^{g_t}\, S_{t-1} + k_t v_t^\top"),
    ("kda", r"S_t = (I - \beta_t k_t k_t^\top)\, \mathrm{Diag}(e^{g_t})\, S_{t-1} + \beta_t k_t v_t^\top"),
    ("gated_deltanet", r"S_t = (I - \beta_t k_t k_t^\top)\, e^{g_t}\, S_{t-1} + \beta_t k_t v_t^\top")])
def test_state_lab_explainer_shows_the_loaded_family_rule(monkeypatch, tmp_path, family, own):
    """Mamba-2's SSD has no delta update; KDA decays per key channel: the explainer's "model" line says so."""
    import importlib
    model = importlib.import_module(f"family_cases.{family}").CASE.make_model()
    model.resize_token_embeddings(8192)  # the bundled tokenizer's ids
    model.save_pretrained(tmp_path / family)
    at = start(monkeypatch, tmp_path / family)
    at.switch_page(LAB).run()
    clean(at)
    [model_line] = [el.value for el in at.latex if "text{model (" in el.value]
    assert own in model_line, model_line


def probe_token(at):
    return next(s for s in at.slider if s.label == "Read the key of token j")


def test_the_noise_probe_reads_the_token_the_scrubber_points_at(lab_page):
    """Issue 29 item 7: token j follows the scrubber (it stayed where an earlier, shorter scrub had clamped it)."""
    at = lab_page
    scrubber(at).set_value(3).run()
    assert probe_token(at).value == 3
    scrubber(at).set_value(10).run()
    clean(at)
    assert probe_token(at).value == 10
    probe_token(at).set_value(5).run()          # a token picked by hand stays while t stays
    at.radio(key="w:lab_rule").set_value("linear").run()
    assert probe_token(at).value == 5
    scrubber(at).set_value(12).run()            # and the next scrub moves it again
    assert probe_token(at).value == 12


def test_the_prepared_sentence_box_names_typed_text_as_your_own(lab_page):
    at = lab_page
    at.text_area[0].set_value("My own words, typed here.").run()
    clean(at)
    assert at.selectbox(key="w:lab_prepared").value == "(your own text)"
    at.selectbox(key="w:lab_prepared").set_value("Counting").run()
    assert at.text_area[0].value.startswith("one two three")
