"""Issue 40, item 7: the Prune page where a by-eye trial stumbled (AppTest, tiny random-init models): the map
beside the ratio inputs with legible cells, one unit (nats/token, % perplexity beside it), a hybrid's rows named as
its inputs, no "-0.0000", Verify's texts as sentences and its table whole, and Heads / Both plans told that the
map predicts key-channel plans only."""
import json
import math

import pytest

from helpers.app import click, open_page, sensitivity_page
from ui.prune.sensitivity_figure import CELL_FONT_PX

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COMPACT = "Map (one layer pruned at a time)"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    from analysis.io import point_cache
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "sweeps")


def compact_spec(block) -> dict | None:
    specs = [json.loads(c.proto.spec) for c in block.get("plotly_chart")]
    return next((s for s in specs if COMPACT in (s["layout"].get("title") or {}).get("text", "")), None)


def beside(at) -> dict:
    """The compact map's figure, found in a column whose sibling column holds the ratio inputs (the same row of
    columns: read while typing, not a section further down the page)."""
    stack = [at.main]
    while stack:
        block = stack.pop()
        children = [c for c in getattr(block, "children", {}).values() if hasattr(c, "children")]
        stack += children
        holding = [c for c in children if any(n.key == "w:layer_ratio_0" for n in c.number_input)]
        for column in children:
            spec = compact_spec(column)
            if spec is not None and holding and all(column is not h for h in holding):
                return spec
    raise AssertionError("the compact map is not beside the ratio inputs")


def mapped(monkeypatch, model_dir):
    at = sensitivity_page(monkeypatch, model_dir)
    click(at, "sensitivity:run")
    at.radio(key="w:prune_mode").set_value("Per layer").run()
    return at


def test_the_map_sits_beside_the_ratio_inputs_with_legible_cells_and_the_typed_plan_outlined(monkeypatch, lm_dir):
    at = mapped(monkeypatch, lm_dir)
    at.number_input(key="w:layer_ratio_0").set_value(0.25)
    at.number_input(key="w:layer_ratio_1").set_value(0.75).run()
    spec = beside(at)
    heat = spec["data"][0]
    assert heat["textfont"]["size"] >= 11 and spec["layout"]["yaxis"]["tickfont"]["size"] >= 11
    assert heat["y"] == ["layer 0", "layer 1"]
    outlined = [(round((s["x0"] + s["x1"]) / 2), round((s["y0"] + s["y1"]) / 2)) for s in spec["layout"]["shapes"]]
    assert outlined == [(0, 0), (1, 1)]  # ρ 0.25 for layer 0, ρ 0.75 for layer 1: the map's two columns
    said = [c.value for c in at.caption]
    assert any("Outlined: the ratio typed" in s and "Your plan, predicted:" in s and "nats/token" in s
               and "perplexity" in s for s in said)
    assert "-0.0000" not in json.dumps(spec) and "+0.0000" not in json.dumps(spec)


def test_history_chart_is_in_nats_per_token_with_the_perplexity_change_beside_it(monkeypatch, lm_dir):
    at = mapped(monkeypatch, lm_dir)
    click(at, "allocate")
    click(at, "sens_verify")
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    [history] = [s for s in specs if "measured Δ vs state" in s["layout"]["title"]["text"]]
    assert history["layout"]["yaxis"]["title"]["text"] == "Δ log perplexity (nats/token)"
    measured = [t for t in history["data"] if t.get("customdata") and len(t["customdata"][0]) == 6]
    for trace in measured:
        for y, custom in zip(trace["y"], trace["customdata"]):
            assert "nats/token" in custom[5] and "%" in custom[5]
            if abs(y) >= 5e-5:
                assert custom[5].startswith(f"{y:+.4f}")
    [table] = [d.value for d in at.dataframe if "Pareto front" in d.value.columns]
    assert table["perplexity change (%)"].tolist() == pytest.approx(
        [100 * math.expm1(x) for x in table["Δ log perplexity (nats/token)"]])


def test_verify_reads_as_sentences_and_its_table_is_whole(monkeypatch, lm_dir):
    import analysis.shrink.allocate
    steps = []
    real = analysis.shrink.allocate.choose_plan

    def recording(*args, progress=None, **kwargs):
        return real(*args, progress=lambda f, text: (steps.append(text), progress(f, text)), **kwargs)
    monkeypatch.setattr("analysis.shrink.allocate.choose_plan", recording)
    at = mapped(monkeypatch, lm_dir)
    at.number_input(key="w:layer_ratio_0").set_value(0.25)
    at.number_input(key="w:layer_ratio_1").set_value(0.25).run()
    click(at, "sens_verify")
    assert any(s.startswith("pruning your plan and measuring it on the choice tokens (") for s in steps)
    assert not any("the your plan" in s or "plan plan" in s for s in steps)
    [frame] = [t.value for t in at.table if "vs chosen, paired ± SE" in t.value.columns]  # st.table: never cut
    assert "predicted, nats/token (perplexity %) ± 1σ" in frame.columns
    assert all("%" in x for x in frame["measured, nats/token (perplexity %)"])
    page_text = " ".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [frame.to_string()])
    assert "-0.0000" not in page_text and "+0.0000" not in page_text
    assert "your plan plan" not in page_text and "(your plan measured" not in page_text
    [chosen] = [m.value for m in at.markdown if m.value.startswith("**Chosen on the choice tokens: ")]
    assert chosen.count("your plan is the chosen one") <= 1 and ". " in chosen and chosen.rstrip().endswith(".")
    words = chosen.split("**", 2)[2].strip()
    assert words[0].isupper()  # the core's clause begins a sentence


def test_a_hybrid_map_names_its_rows_as_the_inputs_do(monkeypatch, nemotron_dir):
    at = mapped(monkeypatch, nemotron_dir)
    labels = [n.label for n in at.number_input if n.key and n.key.startswith("w:layer_ratio_")]
    assert labels == ["ratio ρ, layer 0 (block 0)", "ratio ρ, layer 1 (block 2)"]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    rows = [s["data"][0]["y"] for s in specs if s["data"] and s["data"][0].get("type") == "heatmap"
            and "layer" in " ".join(map(str, s["data"][0].get("y") or []))]
    assert len(rows) == 2  # the full map and the compact one
    assert all(r == ["layer 0 (block 0)", "layer 1 (block 2)"] for r in rows)


@pytest.mark.parametrize("kind", ["heads", "both"])
def test_heads_and_both_plans_say_the_map_predicts_key_channel_plans_only(monkeypatch, lm_dir, kind):
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.radio(key="w:prune_kind").set_value(kind).run()
    assert not at.exception
    assert any("The sensitivity map predicts key-channel plans only" in i.value for i in at.info)
