"""Issue 29 item 7: the offline report reads right wherever it is made — a colour per layer in the spectra and the
agreement labels given room even when Streamlit's plotly theme is the default (the dashboard's export), the
perplexity caption counting the tokens of the table it sits under, and "prediction vs MC" defined where shown."""
import json
import re

import pytest

from analysis.runs import html_report

MODEL = {"name": "tiny"}
INPUTS = {"dataset": "Shakespeare test split", "sequences": 4, "tokens": 256, "stride": 8, "device": "cpu",
          "dtype": "float32", "warning": None}


@pytest.fixture
def streamlit_theme_is_the_default():
    """What importing Streamlit's plotly chart support does in the dashboard's process."""
    import plotly.io as pio
    from streamlit.elements.lib.streamlit_plotly_theme import configure_streamlit_plotly_theme
    before = pio.templates.default
    configure_streamlit_plotly_theme()
    assert pio.templates.default == "streamlit"
    yield
    pio.templates.default = before


def figure(page: str) -> dict:
    """The (data, layout) plotly.newPlot receives in one section's HTML."""
    at = re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*', page).end()
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(page, at)
    layout, _ = decoder.raw_decode(page, re.compile(r"\s*,\s*").match(page, end).end())
    return {"data": data, "layout": layout}


def axis_automargin(layout: dict, axis: str):
    own = layout.get(axis, {}).get("automargin")
    return own if own is not None else layout.get("template", {}).get("layout", {}).get(axis, {}).get("automargin")


def test_spectra_draw_each_layer_in_its_own_colour_under_streamlits_theme(streamlit_theme_is_the_default):
    report = {"model": MODEL, "inputs": INPUTS,
              "spectra": [{"layer": i, "singular_values": [4.0 - i, 1.0, 0.1]} for i in range(4)]}
    fig = figure(html_report.spectra_section(report))
    colours = [t.get("line", {}).get("color") for t in fig["data"]]
    assert None not in colours and len(set(colours)) == 4, colours
    # Streamlit's placeholders (#000001 …) are swapped by its frontend only; in a file they are black
    assert not any(c.startswith("#0000") for c in colours)
    assert "#000001" not in json.dumps(fig["layout"])


def test_agreement_labels_get_room_under_streamlits_theme(streamlit_theme_is_the_default):
    labels = {"drrqr": "DRRQR (strong rank-revealing QR on post-conv activations)", "l1": "L1 of the weights"}
    report = {"model": MODEL, "inputs": INPUTS,
              "importance": {"strategies": ["drrqr", "l1"], "labels": labels, "agreement": [[1, 0.4], [0.4, 1]],
                             "calibration": "2×48 tokens", "ratio": 0.5, "head_k_dims": [32],
                             "kept_energy": {"drrqr": [{"query": 0.8, "key": 0.7}], "l1": [{"query": 0.6, "key": 0.5}]}}}
    fig = figure(html_report.importance_section(report))
    assert axis_automargin(fig["layout"], "yaxis") is True and axis_automargin(fig["layout"], "xaxis") is True


def test_the_perplexity_caption_counts_the_tokens_of_its_table():
    ppl = {"perplexity": 120.5, "bits_per_byte": 1.9, "dataset": "Shakespeare test split", "tokens": 2048,
           "context": 256, "stride": 256}
    report = {"model": MODEL, "inputs": INPUTS,
              "pruning": {"plan": {"strategy": "l1", "head_k_dims": [32]}, "parameters": {"original": 10, "pruned": 8},
                          "directory": "/tmp/p", "recorded": [],
                          "measured": [{"column": "original", "perplexity": ppl},
                                       {"column": "pruned", "perplexity": {**ppl, "perplexity": 130.0}}]}}
    section = html_report.pruning_section(report)
    caption = section[section.index("Measured for this report"):]
    assert "2,048 tokens" in caption and "context 256" in caption
    assert "4 sequences × 256 tokens" not in caption  # the states' inputs, not what the table scored


def test_prediction_vs_mc_is_defined_where_the_report_shows_it():
    noise = {"layers": [], "snr_db": [10.0], "noise_model": "q = k + ε", "samples": 16, "seed": 0,
             "aggregate": "median over sequences", "validity": "first neglected term ≤ 10 %",
             "query_l2_normalised": True}
    section = html_report.noise_section({"model": MODEL, "inputs": INPUTS, "noise": noise})
    assert "<th>prediction vs MC</th>" in section
    definition = re.search(r"prediction vs MC: ([^<]+)", section.split("</table>", 1)[1])
    assert definition and "divided by the Monte Carlo" in definition.group(1) and "median" in definition.group(1)
