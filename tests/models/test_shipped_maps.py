"""The claims about shipped sensitivity maps hold (issue 40, item 6): every bundled sample has an l1 map in
sample_models/results/ that the Prune page opens at once (its weights, default settings, device and dtype), and
docs/deep-sample.md lists exactly the maps that ship (a map removed, added or renamed fails here)."""
import re

import pytest

from analysis.models import load as models
from analysis.shrink.sensitivity import (DEFAULT_RATIOS, RESULTS_DIR, MapSettings, load_shipped, recall_task,
                                         shipped_strategies)

SAMPLES = sorted(s.name for s in models.list_samples())
DOC = models.SAMPLES_DIR.parent / "docs" / "deep-sample.md"


def test_the_bundled_samples_include_the_deep_one():
    assert "gated-deltanet-deep" in SAMPLES


@pytest.mark.parametrize("name", SAMPLES)
def test_every_bundled_sample_ships_an_l1_map_the_page_opens_at_once(name):
    assert "l1" in shipped_strategies(name), f"no sample_models/results/sensitivity-{name}-l1.json"
    model = models.load_model(name, device="cpu")
    metric = "recall" if recall_task(model) is not None else "ppl"
    smap = load_shipped(model, name, MapSettings("l1", DEFAULT_RATIOS, metric=metric))
    assert smap is not None, f"{name}'s shipped l1 map was measured on other weights or settings: rebuild it " \
                             "(sample_models/sensitivity_maps.sh)"
    assert smap["complete"] and len(smap["points"]) == len(smap["layers"]) * len(DEFAULT_RATIOS)


def test_the_docs_list_exactly_the_shipped_maps():
    block = re.search(r"<!-- shipped-maps -->(.*?)<!-- /shipped-maps -->", DOC.read_text(), re.S)
    assert block, "docs/deep-sample.md has no <!-- shipped-maps --> block"
    listed = set(re.findall(r"`(sensitivity-[\w.-]+\.json)`", block[1]))
    shipped = {p.name for p in RESULTS_DIR.glob("sensitivity-*.json") if p.name != "sensitivity-evidence.json"}
    assert listed == shipped
    for name in SAMPLES:  # and every bundled sample has a row
        assert f"| {name} |" in block[1], f"{name} is not in the shipped-maps table"
