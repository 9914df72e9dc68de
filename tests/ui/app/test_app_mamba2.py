"""Issue 21 in the dashboard (AppTest, fast): a transformers-saved tiny Nemotron-H ("M*M-") opened as a local
directory shows its blocks labelled and the implementation line on the Model page, draws States & rank, and the
Query noise page says which figures apply to a model that does not l2-normalise its query (C and B)."""
import pytest

from helpers.app import assert_clean, charts, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


def test_nemotron_h_model_states_and_query_noise(monkeypatch, nemotron_dir):
    at = start(monkeypatch, nemotron_dir)
    assert_clean(at)
    kinds = [str(v) for t in at.table if "Kind" in t.value for v in t.value["Kind"]]
    assert kinds == ["Mamba-2 SSD mixer (layer 0)", "softmax attention", "Mamba-2 SSD mixer (layer 1)",
                     "MLP feed-forward, not pruned"]
    lines = [m.value for m in at.markdown]
    assert any("Loaded as transformers' `NemotronHForCausalLM`" in m for m in lines), lines
    assert any("Each of the 2 linear layers runs the Mamba-2 SSD scan" in m and "`chunked_linear_attention` "
               "(analysis/runtime/cpu_ops/linear_attention.py" in m and "on CUDA" in m for m in lines), lines

    at.switch_page("pages/states.py").run()
    assert_clean(at)
    assert [s["data"][0]["type"] for s in charts(at)][:1] == ["heatmap"]

    at.switch_page("pages/query_noise.py").run()
    assert_clean(at)
    [note] = [i.value for i in at.info if "comparison only" in i.value]
    assert "does not l2-normalise its queries and keys" in note and "raw query: exact" in note
    columns = list(at.dataframe[-1].value.columns)
    assert "raw query: exact" in columns and "re-norm. second order (comparison only)" in columns
    assert not any(c.startswith("re-norm.") and not c.endswith("(comparison only)") for c in columns), columns
    at.selectbox(key="w:mc_samples").set_value(64).run()
    at.button(key="noise_mc_run").click().run()
    assert_clean(at)
    columns = list(at.dataframe[-1].value.columns)
    assert "raw: Monte Carlo" in columns and "re-norm.: Monte Carlo (comparison only)" in columns
    [spec] = charts(at)
    names = [t["name"] for t in spec["data"]]
    assert all(n.endswith("(comparison only)") for n in names if "re-normalised" in n), names
    assert any(n.endswith("raw query: Monte Carlo") for n in names), names
