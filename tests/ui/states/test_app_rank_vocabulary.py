"""Issue 29 item 5 under AppTest: one vocabulary of rank. States & rank and Query noise give the drilled-in head a
rank card with every count side by side and its definition; the card's headline is the effective rank the maps
show; the map's notice calls only the effective rank the count of directions used."""
import json

import numpy as np
import pytest

from helpers.app import assert_clean, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")
MEASURES = ["effective rank (headline)", "numerical rank at τ = 0.001", "energy rank at 99%", "participation ratio",
            "stable rank = u · min(dk, dv)", "count of s > s₁/10"]


def card(at, where: str):
    [box] = [e for e in at.expander if e.label.startswith(f"Rank card: {where}")]
    return box.dataframe[0].value


def test_a_rank_card_beside_the_maps_with_the_headline_they_show(monkeypatch, lm_dir):
    at = start(monkeypatch, lm_dir)
    at.switch_page("pages/states.py").run()
    assert_clean(at)
    assert at.selectbox(key="w:metric").value == "effective_rank"   # issue 43: the headline is the default
    at.selectbox(key="w:metric").set_value("rank_utilization").run()
    assert_clean(at)
    frame = card(at, "layer 0, head 0")
    assert list(frame["measure"]) == MEASURES and frame["definition"].str.len().min() > 10
    notices = [c.value for c in at.caption if c.value.startswith("Notice: Rank utilization")]
    assert notices and "the count of directions used" in notices[0] and "directions carry" not in notices[0]

    at.selectbox(key="w:metric").set_value("effective_rank").run()
    assert_clean(at)
    heat = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith("-rank_heatmap"))
    erank = float(card(at, "layer 0, head 0")["value"][0])
    # the map averages the core's float64 effective ranks of the float32 states; the card recomputes them from
    # the same singular values in float64 numpy: 1e-6 relative
    assert erank == pytest.approx(heat["data"][0]["z"][0][0], rel=1e-6)

    at.switch_page("pages/query_noise.py").run()
    assert_clean(at)
    noise_card = card(at, "layer 0, head 0")
    assert list(noise_card["measure"]) == MEASURES
    assert np.isclose(float(noise_card["value"][0]), erank, rtol=1e-9)  # the same states, the same figure
