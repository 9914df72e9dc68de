"""lm-evaluation-harness on the models this tool loads and prunes (issue 33): the harness's own numbers, every family,
pruned and recall models, local tasks with no network, Stop within a batch."""
from __future__ import annotations

import importlib
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.evaluate import harness_tasks
from analysis.evaluate.harness import TaskSettings, evaluate_tasks, prepare, project_lm
from analysis.io.point_identity import model_identity
from analysis.models.load import load_model, load_tokenizer
from analysis.runtime.cancel import Cancelled
from family_cases import CASE_MODULES
from family_cases.text_lm import VOCAB
from ui_fixtures import save_pruned_sample

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_models"
TEXT_TASKS = ("shakespeare_next_line", "wikipedia_last_word", "associative_recall_16_pairs")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_eval_gives_the_harness_own_numbers_on_a_sample_and_on_a_pruned_model(tmp_path):
    """`lm_eval` the plain way (its `hf` model loading the directory, after analysis.ready()) and `analysis eval`:
    identical accuracies and standard errors. Same process, same CPU, same batches: the same float operations, so
    the per-doc decisions and their means are equal exactly."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    _, pruned = save_pruned_sample(SAMPLES / "deltanet-small", tmp_path / "pruned", [48, 32, 32, 16])
    assert json.loads((pruned / "config.json").read_text())["model_type"].startswith("pruned_")
    for model_dir in (SAMPLES / "deltanet-small", pruned):
        plain = lm_eval.simple_evaluate(
            model="hf", model_args=f"pretrained={model_dir},device=cpu", tasks=list(TEXT_TASKS), limit=10,
            batch_size=4, task_manager=TaskManager(include_path=str(harness_tasks.LOCAL_DIR), include_defaults=False),
            log_samples=False)["results"]
        out = tmp_path / f"{model_dir.name}.json"
        assert main(["eval", str(model_dir), "--tasks", ",".join(TEXT_TASKS), "--limit", "10", "--batch-size", "4",
                     "--device", "cpu", "--json", str(out), "--quiet"]) == 0
        ours = json.loads(out.read_text())
        for name in TEXT_TASKS:
            theirs = {k.split(",")[0]: v for k, v in plain[name].items() if k.endswith(",none")}
            mine = ours["tasks"][name]["metrics"]
            assert {m: row["value"] for m, row in mine.items()} == {m: v for m, v in theirs.items()
                                                                    if not m.endswith("_stderr")}
            assert {f"{m}_stderr": row["stderr"] for m, row in mine.items()} == {
                m: v for m, v in theirs.items() if m.endswith("_stderr")}
            assert ours["tasks"][name]["docs"] == 10 and ours["tasks"][name]["local"]
        assert "acc_norm" in ours["tasks"]["shakespeare_next_line"]["metrics"]
        assert (ours["device"], ours["dtype"], ours["harness"]) == ("cpu", "float32",
                                                                     f"lm-evaluation-harness {lm_eval.__version__}")


@pytest.mark.parametrize("family", CASE_MODULES)
def test_every_family_tiny_model_runs_through_the_harness(family):
    """The harness wraps each family's model as built (hybrids, fused projections, Mamba-2 mixers): the
    vocabulary is widened to the bundled tokenizer's so it reads the local text tasks."""
    model = importlib.import_module(f"family_cases.{family}").make_model()
    model.resize_token_embeddings(VOCAB)
    report = evaluate_tasks(model, load_tokenizer(SAMPLES / "deltanet-small"),
                            TaskSettings(("shakespeare_next_line",), limit=2, batch_size=4))
    row = report["tasks"]["shakespeare_next_line"]
    assert row["docs"] == 2 and row["accuracy"] in (0.0, 0.5, 1.0) and row["chance"] == 0.25


def test_a_recall_model_reads_the_recall_tasks_as_its_own_ids():
    """The harness's accuracy on deltanet-recall equals a direct argmax over the same docs mapped to the model's ids
    (k<i> → i, v<j> → n_keys + j): at most one doc apart (the harness pads its batches; a near tie could flip)."""
    from analysis.data import recall_text
    from analysis.data.inputs import recall_task
    model = load_model("deltanet-recall", device="cpu")
    limit = 40
    row = evaluate_tasks(model, None, TaskSettings(("associative_recall_32_pairs",), limit=limit, batch_size=8))
    vocab = {w: i for i, w in enumerate(recall_text.words(recall_task(model)))}
    docs = [json.loads(line) for line in (harness_tasks.LOCAL_DIR / "associative_recall_32_pairs.jsonl")
            .read_text().splitlines()][:limit]
    right = 0
    with torch.no_grad():
        for doc in docs:
            ids = torch.tensor([[vocab[w] for w in doc["context"].split()]])
            right += int(model(ids).logits[0, -1].argmax()) == vocab[doc["target"].strip()]
    assert right / limit > 0.5  # the trained model recalls most of 32 pairs (the card: about 0.9)
    assert abs(row["tasks"]["associative_recall_32_pairs"]["accuracy"] - right / limit) <= 1 / limit


def test_local_tasks_need_no_network_and_leave_the_model_and_tokenizer_unchanged(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a local task tried the network")
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    model = load_model("deltanet-small", device="cpu")
    tokenizer = load_tokenizer(model)
    before = (model_identity(model), len(tokenizer), tokenizer.pad_token)
    report = evaluate_tasks(model, tokenizer, TaskSettings(("shakespeare_last_word",), limit=2))
    assert report["tasks"]["shakespeare_last_word"]["dataset"].startswith("local: ")
    assert (model_identity(model), len(tokenizer), tokenizer.pad_token) == before  # the caller's objects unchanged
    assert not model.training


def test_stop_ends_an_evaluation_within_a_batch():
    model = load_model("deltanet-small", device="cpu")
    forwards = []
    hook = model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        with pytest.raises(Cancelled):  # 4 docs × 4 choices in batches of 2: 8 batches without the Stop
            evaluate_tasks(model, load_tokenizer(model), TaskSettings(("shakespeare_next_line",), limit=4,
                                                                      batch_size=2), cancel=lambda: len(forwards) >= 2)
    finally:
        hook.remove()
    assert len(forwards) == 2


def test_the_local_tasks_are_rebuilt_byte_for_byte_from_the_bundled_texts(tmp_path):
    done = subprocess.run([sys.executable, str(harness_tasks.LOCAL_DIR / "build_tasks.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    built = sorted(p.name for p in tmp_path.iterdir())
    shipped = sorted(p.name for p in harness_tasks.LOCAL_DIR.iterdir() if p.suffix in (".yaml", ".jsonl", ".json"))
    assert built == shipped
    assert all((tmp_path / n).read_bytes() == (harness_tasks.LOCAL_DIR / n).read_bytes() for n in built)
    local = harness_tasks.local_tasks()
    assert set(local) == {"shakespeare_last_word", "wikipedia_last_word", "shakespeare_next_line",
                          "shakespeare_word_order", *(f"associative_recall_{n}_pairs" for n in (16, 32, 64))}
    assert local["shakespeare_next_line"].chance == 0.25 and local["associative_recall_64_pairs"].recall_keys == 128
    from analysis.cli.commands.eval_cmds import LOCAL_HINT  # --help names every local text task
    assert all(name in LOCAL_HINT for name, t in local.items() if not t.recall_keys)


# ---- bad input: one sentence, exit 2, nothing written ------------------------------------------------------

def refused(capsys, tmp_path, *args) -> str:
    out = tmp_path / "never.json"
    assert main(["eval", *args, "--json", str(out), "--quiet"]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_bad_input_is_one_sentence_and_nothing_is_written(capsys, tmp_path):
    err = refused(capsys, tmp_path, "deltanet-small", "--tasks", "shakespeare_nextline")
    assert "close names: shakespeare_next_line" in err and "associative_recall_16_pairs" in err
    assert "whole number ≥ 1" in refused(capsys, tmp_path, "deltanet-small", "--tasks", "shakespeare_next_line",
                                          "--limit", "0")
    assert "at most 64" in refused(capsys, tmp_path, "deltanet-small", "--tasks", "shakespeare_next_line",
                                   "--num-fewshot", "65")
    assert "not a folder" in refused(capsys, tmp_path, "deltanet-small", "--tasks", "mine",
                                     "--include-path", str(tmp_path / "absent"))
    err = refused(capsys, tmp_path, "deltanet-recall", "--tasks", "shakespeare_next_line")
    assert "associative-recall model" in err and "associative_recall_32_pairs" in err
    with pytest.raises(AnalysisError, match="cannot wrap"):
        project_lm(torch.nn.Linear(2, 2), load_tokenizer(SAMPLES / "deltanet-small"), 8)


def test_a_data_set_that_is_neither_cached_nor_reachable_is_one_sentence(capsys, tmp_path, monkeypatch):
    """A task of the user's (as a harness task would be) whose data set lives on the hub: with the hub unreachable
    the libraries read their cache only, so the refusal is immediate and names the local tasks."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "hub_task.yaml").write_text(
        "task: hub_task\ndataset_path: state-rank-tests/never-cached\noutput_type: multiple_choice\n"
        "test_split: test\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: ['a', 'b']\n")
    monkeypatch.setattr(harness_tasks, "hub_reachable", lambda timeout=0: False)
    err = refused(capsys, tmp_path, "deltanet-small", "--tasks", "hub_task", "--include-path", str(tmp_path / "tasks"))
    assert "state-rank-tests/never-cached" in err and "not in the local Hugging Face cache" in err
    assert "shakespeare_next_line" in err
    import datasets
    from huggingface_hub import constants
    assert not datasets.config.HF_HUB_OFFLINE and not constants.HF_HUB_OFFLINE  # the offline switch is restored


def test_a_users_own_task_yaml_reads_its_local_data_with_the_hub_unreachable(tmp_path, monkeypatch):
    """--include-path, as lm-eval's CLI takes it: the datasets `json` builder on the user's file, in cache-only mode
    (the hub does not answer here), scored like any task."""
    import datasets
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")  # its arrow cache: ours, temporary
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"q": q, "a": a}) + "\n" for q, a in
                            [("To be, or not to be: that is the", 0), ("Now is the winter of our", 1)]))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "mine.yaml").write_text(
        f"task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {docs}\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: q\ndoc_to_target: a\n"
        "doc_to_choice: ['question', 'discontent']\nmetric_list:\n  - metric: acc\n")
    monkeypatch.setattr(harness_tasks, "hub_reachable", lambda timeout=0: False)
    model = load_model("deltanet-small", device="cpu")
    row = evaluate_tasks(model, load_tokenizer(model), TaskSettings(("mine",), include_path=str(tmp_path / "tasks")))
    assert row["tasks"]["mine"]["docs"] == 2 and row["tasks"]["mine"]["dataset"] == f"json ({docs})"
    assert not row["tasks"]["mine"]["local"] and "chance" not in row["tasks"]["mine"]


def test_prepare_refuses_a_few_shot_count_larger_than_the_pool():
    with pytest.raises(AnalysisError, match="more than the 32 that task associative_recall_16_pairs"):
        prepare(TaskSettings(("associative_recall_16_pairs",), num_fewshot=33))
