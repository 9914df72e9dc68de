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
        assert "softmax attention" in kinds and any(k.startswith("linear attention") for k in kinds), kinds
    at.switch_page("pages/states.py").run()
    assert_clean(at)
    assert [s["data"][0]["type"] for s in charts(at)][:1] == ["heatmap"]
