"""Downstream accuracy in the dashboard (issue 33): the Sweep page plots accuracy vs ratio beside perplexity, the
Prune page's before/after table gains the tasks' accuracy with the harness's standard errors."""
import pytest

from helpers.app import charts, click, open_page, sweep_page

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only", "sweep_cache")


def test_sweep_page_plots_accuracy_vs_ratio_beside_perplexity(monkeypatch, lm_dir):
    at = sweep_page(monkeypatch, lm_dir)
    at.multiselect(key="w:sweep_strategies").set_value(["l1"])
    at.multiselect(key="w:sweep_tasks").set_value(["shakespeare_word_order"])
    at.number_input(key="w:sweep_task_limit").set_value(2).run()
    assert any("shakespeare_word_order" in c.value and "chance 1/4" in c.value for c in at.caption)
    click(at, "sweep:run")
    specs = {s["layout"]["title"]["text"]: s for s in charts(at)}
    assert "Perplexity vs pruning ratio" in specs
    [title] = [t for t in specs if t.startswith("shakespeare_word_order: acc vs pruning ratio")]
    assert "± harness standard error, 2 docs" in title
    [line] = specs[title]["data"]
    assert line["x"] == [0.5] and line["error_y"]["visible"] and 0 <= line["y"][0] <= 1
    notes = [a["text"] for a in specs[title]["layout"]["annotations"]]
    assert any(n.startswith("unpruned ") for n in notes) and "chance 0.25" in notes
    table = at.table[-1].value
    assert {"shakespeare_word_order (acc)", "shakespeare_word_order ± SE"} <= set(table.columns)


def test_prune_page_table_gains_the_tasks_accuracy_with_standard_errors(monkeypatch, lm_dir):
    at = open_page(monkeypatch, lm_dir, "pages/prune.py")
    at.selectbox(key="w:prune_strategy").set_value("l1")
    at.multiselect(key="w:prune_tasks").set_value(["shakespeare_word_order"])
    at.number_input(key="w:prune_task_limit").set_value(2).run()
    click(at, "prune_run")
    table = at.table[1].value
    [row] = [r for r in table.index if r.startswith("shakespeare_word_order: acc (2 docs, 0-shot")]
    before, after, delta, pct = table.loc[row].tolist()
    assert " ± " in before and " ± " in after and delta != "—"
    assert any("task accuracy: lm-evaluation-harness" in c.value for c in at.caption)


def test_a_recall_model_is_offered_the_recall_tasks_only(monkeypatch, recall_dir):
    at = open_page(monkeypatch, recall_dir, "pages/prune.py")
    assert at.multiselect(key="w:prune_tasks").options == [
        "associative_recall_16_pairs", "associative_recall_32_pairs", "associative_recall_64_pairs"]
