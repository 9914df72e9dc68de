"""Issue 12: the dashboard opens a model of every family from a plain local directory (saved by transformers,
no project files), shows every block in order and collects the linear layers' states."""
import pytest

from helpers.app import assert_clean, charts, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


@pytest.mark.parametrize("family", ["qwen3_5", "kda", "fla_hybrid", "kimi_linear", "mamba2",
                                    "mamba2:granitemoehybrid"])
def test_local_directory_of_each_family_opens_on_model_and_states(monkeypatch, tmp_path, family):
    import importlib
    family, _, variant = family.partition(":")   # family_cases module[:model type it can also build]
    case = importlib.import_module(f"family_cases.{family}").CASE
    model_dir = tmp_path / family
    model = case.make_model(variant) if variant else case.make_model()
    model.resize_token_embeddings(8192)  # the bundled tokenizer's ids (a 97-token toy vocabulary cannot read text)
    model.save_pretrained(model_dir)
    assert not any(p.name.startswith(".state-rank") or p.name == "tokenizer.json" for p in model_dir.iterdir())
    at = start(monkeypatch, model_dir)
    assert_clean(at)
    kinds = [str(v) for t in at.table if "Kind" in t.value for v in t.value["Kind"]]
    if family != "kda":  # hybrids list every block in order, softmax attention as such
        linear = "Mamba-2 SSD mixer" if family == "mamba2" else "linear attention"   # the adapter's words
        assert any(k.startswith("softmax attention") for k in kinds) and any(k.startswith(linear) for k in kinds), kinds
    at.switch_page("pages/states.py").run()
    assert_clean(at)
    assert [s["data"][0]["type"] for s in charts(at)][:1] == ["heatmap"]


def test_pca_is_not_offered_where_each_key_channel_has_its_own_decay(monkeypatch, tmp_path):
    """KDA keeps one decay per key channel: a rotation (PCA) cannot be pruned into it, so the Prune and Sweep
    pages do not offer it (rather than refusing after Prune); a DeltaNet still gets it."""
    from family_cases.kda import CASE
    model_dir = tmp_path / "kda"
    model = CASE.make_model()
    model.resize_token_embeddings(8192)
    model.save_pretrained(model_dir)
    at = start(monkeypatch, model_dir)
    at.switch_page("pages/prune.py").run()
    assert_clean(at)
    options = at.selectbox(key="w:prune_strategy").options
    assert "PCA" not in " ".join(options) and len(options) >= 4, options
    assert any("Not offered for" in c.value and "PCA" in c.value for c in at.caption)
    at.switch_page("pages/sweep.py").run()
    assert_clean(at)
    assert "PCA" not in " ".join(at.multiselect(key="w:sweep_strategies").options)


def test_states_on_a_hybrid_says_what_head_means_and_notices_under_each_chart(monkeypatch, tmp_path):
    """Qwen3.5's Gated DeltaNet has 4 value heads over 2 key heads: States counts value heads and says so."""
    from family_cases.qwen3_5 import CASE
    model = CASE.make_model()
    model.resize_token_embeddings(8192)
    model.save_pretrained(tmp_path / "q")
    at = start(monkeypatch, tmp_path / "q")
    at.switch_page("pages/states.py").run()
    assert_clean(at)
    captions = [c.value for c in at.caption]
    assert any("is a value head (0–3)" in c and "2 key heads" in c for c in captions)
    notices = [c for c in captions if c.startswith("Notice:")]
    assert len(notices) == len(charts(at))  # one plain line under each chart


@pytest.mark.parametrize("family, rule", [
    ("gla", r"S_t = \mathrm{Diag}(e^{g_t})\, S_{t-1} + k_t v_t^\top"),
    ("rwkv7", r"S_t = \left(\mathrm{Diag}(e^{g_t}) + b_t a_t^\top\right) S_{t-1} + k_t v_t^\top")])
def test_gla_and_rwkv7_open_on_every_page(monkeypatch, tmp_path, family, rule):
    """Issue 31: the two families added from fla open on every page; the Model page and the State lab show the
    family's own recurrence (GLA: per-channel decay, no delta rule; RWKV-7: diagonal plus rank one, no readout
    scale), and PCA is not offered (one decay per key channel)."""
    import importlib

    from helpers.app import PAGES
    model = importlib.import_module(f"family_cases.{family}").CASE.make_model()
    model.resize_token_embeddings(8192)  # the bundled tokenizer's ids
    model.save_pretrained(tmp_path / family)
    at = start(monkeypatch, tmp_path / family)
    for page in PAGES:
        at.switch_page(page).run()
        assert_clean(at)
        if page in ("pages/model.py", "pages/state_lab.py"):
            assert any(rule in el.value for el in at.latex), (page, [el.value for el in at.latex])
            readout = r"o_t = S_t^\top q_t" if family == "rwkv7" else r"o_t = \mathrm{scale}\cdot S_t^\top q_t"
            assert any(rule in el.value and readout in el.value for el in at.latex), page
        if page == "pages/prune.py":
            assert "PCA" not in " ".join(at.selectbox(key="w:prune_strategy").options)
        if page == "pages/importance.py":
            assert "PCA" not in " ".join(at.multiselect(key="w:importance_strategies").options)
            assert any("Not offered for" in c.value and "PCA" in c.value for c in at.caption)
