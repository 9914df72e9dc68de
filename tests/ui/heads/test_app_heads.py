"""Issue 32 on the dashboard (AppTest, tiny random-init DeltaNet with 2 heads per layer):
- States & rank: the head groups and their stability are the ones `python -m analysis heads --json` writes;
- Prune: a "Heads" plan gives the numbers `prune --heads` gives (same kept heads, state bytes, perplexity);
- Channel importance: the Heads view scores heads, lists the kept ones and their agreement;
- State lab: a low-rank and a high-rank head of the layer side by side;
- Sweep: the equal-budget comparison draws dk and head plans on one state-bytes axis with the CLI's numbers.
"""
from __future__ import annotations

import json

import pytest

from analysis.cli.main import main
from analysis.shrink import plan_points
from helpers.app import SMALL, charts, clean, click, open_page

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only", "sweep_cache")


def test_head_groups_on_the_states_page_equal_the_cli(monkeypatch, lm_dir, tmp_path):
    out = tmp_path / "heads.json"
    assert main(["heads", str(lm_dir), "--device", "cpu", "--quiet", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    at = open_page(monkeypatch, lm_dir, "pages/states.py")
    at.toggle(key="w:heads_groups").set_value(True).run()
    clean(at)
    for layer in range(len(report["layers"])):
        at.selectbox(key="w:sel_layer").set_value(layer).run()
        clean(at)
        row = report["layers"][layer]
        [table] = [t.value for t in at.table if "low-rank heads" in t.value.columns]
        for t, (_, got) in enumerate(table.iterrows()):
            low = [str(h["head"]) for h in row["heads"] if h["texts"][t]["group"] == "low"]
            assert got["low-rank heads"] == ", ".join(low)
        [metric] = [m for m in at.metric if m.label == "Heads with the same group on every input"]
        assert metric.value == f"{row['agreement']:.0%}"
        # issue 43: κ on this page is the condition number; the groups' chance-corrected score is "agreement a"
        kappa = "n/a" if row["kappa"] is None else f"{row['kappa']:.2f}"
        assert metric.help.startswith("Agreement a: ") and metric.help.endswith(kappa) and "κ" not in metric.help
        assert "κ" not in report["notice"][layer] and "agreement a" in report["notice"][layer]
        assert f"Notice: {report['notice'][layer]}." in [c.value for c in at.caption]
    spec = [s for s in charts(at) if "effective rank of each head" in s["layout"]["title"]["text"]][0]
    assert len(spec["data"]) == len(report["texts"]) * len(report["layers"][0]["heads"])


def test_a_heads_plan_on_the_prune_page_equals_the_cli(monkeypatch, lm_dir, tmp_path):
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.radio(key="w:prune_kind").set_value("heads").run()
    at.selectbox(key="w:prune_head_strategy").set_value("random").run()
    at.slider(key="w:prune_head_ratio").set_value(0.5).run()
    clean(at)
    assert at.table[0].value["heads after"].tolist() == [1, 1]
    click(at, "prune_run")
    page = at.table[1].value
    out = tmp_path / "cli.json"
    assert main(["prune", str(lm_dir), "--device", "cpu", "--heads", "0.5", "--head-strategy", "random",
                 "--eval-context", str(SMALL["eval_context"]), "--eval-tokens", str(SMALL["eval_tokens"]),
                 "--time-kernel", "--out", str(tmp_path / "m"), "--quiet", "--json", str(out)]) == 0
    cli = json.loads(out.read_text())
    ppl = [r for r in page.index if r.startswith("perplexity (")][0]
    assert float(page.loc[ppl, "after pruning"]) == pytest.approx(cli["measured_after"]["perplexity"]["perplexity"],
                                                                 abs=5e-3)
    assert page.loc["fp32 state bytes per sequence", "after pruning"].replace(",", "") == \
        str(cli["measured_after"]["state_bytes_per_sequence"])
    assert page.loc["value heads, by layer"].tolist()[:2] == ["2, 2", "1, 1"]
    assert cli["heads"]["kept_value_heads"] == [[1], [1]]  # the page's random choice is the CLI's (same seed)
    assert any("value heads [2, 2] → [1, 1]" in s.value for s in at.subheader)
    # issue 29: the head prune is a point on the history of plans, placed by its state bytes and marked with its
    # heads, and a click on it does not put its key dims alone into the inputs as if they were its plan
    [history] = [d.value for d in at.dataframe if "Pareto front" in d.value.columns]
    assert history["value heads"].tolist() == ["1 1"] and history["state bytes"].tolist() == \
        [cli["measured_after"]["state_bytes_per_sequence"]]
    [[point]] = [list(held.values()) for held in at.session_state["plan_history"].values()]
    assert point["head_strategy"] == "random" and "not put into the inputs" in plan_points.not_restorable(point)
    at.radio(key="w:prune_kind").set_value("both").run()  # the map predicts the key-channel part only: said
    assert any(c.value.startswith("Your plan also removes whole heads") for c in at.caption)


def test_the_heads_view_scores_keeps_and_compares(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/importance.py")
    at.radio(key="w:importance_view").set_value("Heads").run()
    clean(at)
    titles = [s["layout"]["title"]["text"] for s in charts(at)]
    assert any(t.startswith("Head scores, layer 0") for t in titles) and "Jaccard overlap of the kept heads" in titles
    kept = [t.value for t in at.table if "Joint rank-norm" in t.value.columns][0]
    assert kept.shape == (2, 4) and all(len(v.split(", ")) == 1 for v in kept["Random"])


def test_the_state_lab_shows_both_groups_side_by_side(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/state_lab.py")
    at.toggle(key="lab_partner").set_value(True).run()
    clean(at)
    titles = [s["layout"]["title"]["text"] for s in charts(at)]
    groups = [t for t in titles if "-rank), t = " in t]
    assert len(groups) == 2 and {"low-rank" in g for g in groups} == {True, False}


def test_the_equal_budget_comparison_on_the_sweep_page_equals_the_cli(monkeypatch, lm_dir, tmp_path):
    at = open_page(monkeypatch, lm_dir, "pages/sweep.py")
    at.multiselect(key="w:budget_strategies").set_value(["l1"])
    at.multiselect(key="w:budget_head_strategies").set_value(["random"])
    at.text_input(key="w:budget_fractions").set_value("0.5")
    at.number_input(key="w:budget_tokens").set_value(512).run()
    click(at, "budget:run")
    [table] = [t.value for t in at.table if "Δ log ppl ± SE" in t.value.columns]
    out = tmp_path / "budget.json"
    assert main(["sweep", str(lm_dir), "--device", "cpu", "--axis", "both", "--strategies", "l1", "--head-strategies",
                 "random", "--budgets", "0.5", "--eval-tokens", "512", "--no-cache", "--quiet", "--json",
                 str(out)]) == 0
    cli = json.loads(out.read_text())["results"]
    assert table.index.tolist() == [p["kind"] for p in cli] == ["unpruned", "dk", "heads", "mixed"]
    assert table["perplexity"].tolist() == [f"{p['perplexity']:.3f}" for p in cli]
    assert table["Δ log ppl ± SE"].tolist()[1:] == [f"{p['delta_log_ppl']:+.4f} ± {p['se']:.4f}" for p in cli[1:]]
    [spec] = [s for s in charts(at) if "state bytes" in s["layout"]["title"]["text"]]
    assert sorted(t["name"] for t in spec["data"] if t.get("x")) == ["dk: l1", "heads: random", "mixed: l1 + random"]
