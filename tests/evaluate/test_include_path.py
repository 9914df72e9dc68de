"""Issue 41, probe rows 2–4: a user's `--include-path` task YAMLs. Their Python (`!function`) never runs silently,
the result row names the data set, a missing local data file is named, and a YAML that does not parse is shown
with its file and line (lm-evaluation-harness would skip it, and call its task unknown)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.evaluate import harness_tasks
from analysis.evaluate.harness import TaskSettings, prepare

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DOCS = [{"q": "To be, or not to be: that is the", "a": 0}, {"q": "Now is the winter of our", "a": 1}]
MC = ("output_type: multiple_choice\ntest_split: test\ndoc_to_text: q\ndoc_to_target: a\n"
      "doc_to_choice: ['question', 'discontent']\nmetric_list:\n  - metric: acc\n")
# the user's loader: on import it leaves a mark (the file ran) and says so on stderr (to order it after our note)
LOADER = '''import json, sys
from pathlib import Path
import datasets
HERE = Path(__file__).resolve().parent
(HERE / "imported.mark").write_text("ran")
print("USER LOADER IMPORTED", file=sys.stderr, flush=True)
def load(data_file, **_metadata):
    docs = [json.loads(line) for line in open(HERE / data_file, encoding="utf-8")]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs, split="test")})
'''


@pytest.fixture(autouse=True)
def hub_unreachable(monkeypatch):
    """No network here: the user's tasks are read in cache-only mode, without waiting for a connect timeout."""
    monkeypatch.setattr(harness_tasks, "hub_reachable", lambda timeout=0: False)


def code_task(folder: Path, data_file: str = "docs.jsonl") -> Path:
    """A task YAML whose data set is built by the user's Python file beside it (`custom_dataset: !function`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mytask.yaml").write_text(f"task: my_code_task\ncustom_dataset: !function myloader.load\n"
                                        f"dataset_kwargs:\n  data_file: {data_file}\n{MC}")
    (folder / "myloader.py").write_text(LOADER)
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return folder


def eval_cli(capsys, folder: Path, task: str, *extra, json_out: Path | None = None) -> tuple[int, str, str]:
    argv = ["eval", "deltanet-small", "--tasks", task, "--include-path", str(folder), "--limit", "2", "--quiet",
            "--device", "cpu", *extra]
    code = main(argv + (["--json", str(json_out)] if json_out else []))
    got = capsys.readouterr()
    return code, got.out, got.err


def one_sentence(code: int, err: str) -> str:
    assert code == 2, err
    line = err.strip()
    assert line.startswith("error: ") and "\n" not in line and "Traceback" not in line, err
    return line


# ---- row 2: task code --------------------------------------------------------------------------------------

def test_task_code_is_refused_without_the_flag_naming_the_yaml_and_the_python_file(tmp_path, capsys):
    folder = code_task(tmp_path / "tasks")
    out = tmp_path / "never.json"
    err = one_sentence(*eval_cli(capsys, folder, "my_code_task", json_out=out)[::2])
    assert str(folder / "mytask.yaml") in err and str((folder / "myloader.py").resolve()) in err, err
    assert "--allow-task-code" in err, err
    assert not (folder / "imported.mark").exists(), "the user's Python ran without --allow-task-code"
    assert not out.exists()


def test_task_code_reached_through_an_include_or_a_group_is_refused_too(tmp_path):
    folder = code_task(tmp_path / "tasks")
    template = folder / "_base_template.yaml"
    template.write_text((folder / "mytask.yaml").read_text().replace("task: my_code_task\n", "task: base_only\n"))
    (folder / "mytask.yaml").unlink()
    (folder / "child.yaml").write_text("include: _base_template.yaml\ntask: child_task\n")
    (folder / "group.yaml").write_text("group: my_group\ntask:\n  - child_task\n")
    for name in ("child_task", "my_group"):
        with pytest.raises(AnalysisError) as refused:
            prepare(TaskSettings((name,), include_path=str(folder)))
        assert str(template) in str(refused.value) and "myloader.py" in str(refused.value), refused.value
        assert "--allow-task-code" in str(refused.value)
    assert not (folder / "imported.mark").exists()


def test_a_task_without_code_beside_one_with_code_is_not_refused(tmp_path):
    folder = code_task(tmp_path / "tasks")
    docs = tmp_path / "plain.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (folder / "plain.yaml").write_text(f"task: plain_task\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                       f"    test: {docs}\n{MC}")
    plan = prepare(TaskSettings(("plain_task", "shakespeare_next_line"), limit=2, include_path=str(folder)))
    assert set(plan.leaves) == {"plain_task", "shakespeare_next_line"}  # the local tasks' own loader is ours
    assert not (folder / "imported.mark").exists()


def test_allowed_task_code_is_named_on_stderr_before_it_runs_and_the_row_names_the_data_set(tmp_path, capsys):
    folder = code_task(tmp_path / "tasks")
    out = tmp_path / "eval.json"
    code, stdout, err = eval_cli(capsys, folder, "my_code_task", "--allow-task-code", json_out=out)
    assert code == 0, err
    loader = str((folder / "myloader.py").resolve())
    note = next(i for i, line in enumerate(err.splitlines()) if "--allow-task-code" in line and loader in line)
    ran = err.splitlines().index("USER LOADER IMPORTED")
    assert note < ran, err  # named first, then run
    row = json.loads(out.read_text())["tasks"]["my_code_task"]
    assert row["docs"] == 2 and "None" not in row["dataset"], row["dataset"]
    assert loader in row["dataset"] and "docs.jsonl" in row["dataset"] and "load" in row["dataset"], row["dataset"]
    code, stdout, _ = eval_cli(capsys, folder, "my_code_task", "--allow-task-code")
    assert code == 0 and loader in stdout and ", None," not in stdout, stdout  # the printed row too


# ---- row 3: a missing local data file ----------------------------------------------------------------------

def test_a_missing_local_data_file_of_a_json_task_is_named(tmp_path, capsys):
    folder = tmp_path / "tasks"
    folder.mkdir()
    gone = tmp_path / "nowhere" / "docs.jsonl"
    (folder / "missing.yaml").write_text(f"task: my_missing_task\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                         f"    test: {gone}\n{MC}")
    err = one_sentence(*eval_cli(capsys, folder, "my_missing_task")[::2])
    assert str(gone) in err and "missing" in err and "Hugging Face cache" not in err, err
    assert str(folder / "missing.yaml") in err, err


def test_a_data_file_missing_for_the_users_own_loader_is_named(tmp_path, capsys):
    folder = code_task(tmp_path / "tasks", data_file="gone.jsonl")
    code, _, err = eval_cli(capsys, folder, "my_code_task", "--allow-task-code")
    err = one_sentence(code, err.strip().splitlines()[-1])  # after the note naming the loader and its own line
    assert str(folder.resolve() / "gone.jsonl") in err and "missing" in err, err
    assert "Hugging Face cache" not in err, err


# ---- row 4: a YAML that does not parse ---------------------------------------------------------------------

def test_a_yaml_that_does_not_parse_is_shown_with_its_file_and_line(tmp_path, capsys):
    folder = tmp_path / "tasks"
    folder.mkdir()
    bad = folder / "my_bad_task.yaml"
    bad.write_text("task: my_bad_task\ndataset_path: json\n  dataset_kwargs: [oops\ntest_split: test\n")
    err = one_sentence(*eval_cli(capsys, folder, "my_bad_task")[::2])
    assert str(bad) in err and "line 3" in err and "does not parse" in err, err
    assert "Unknown task" not in err and "close names" not in err, err
    (folder / "my_bad_task.yaml").write_text("- just\n- a list\n")
    err = one_sentence(*eval_cli(capsys, folder, "my_bad_task")[::2])
    assert str(bad) in err and "not a task's settings" in err, err


def test_relative_data_files_are_read_from_the_working_directory_and_hub_data_files_are_not_local(
        tmp_path, capsys, monkeypatch):
    folder = tmp_path / "tasks"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    (folder / "rel.yaml").write_text(f"task: rel_task\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                     f"    test: data/docs.jsonl\n{MC}")
    (folder / "hub.yaml").write_text(f"task: hub_files_task\ndataset_path: state-rank-tests/never-cached\n"
                                     f"dataset_kwargs:\n  data_files:\n    test: data/docs.jsonl\n{MC}")
    err = one_sentence(*eval_cli(capsys, folder, "rel_task")[::2])
    assert str(tmp_path / "data" / "docs.jsonl") in err and "missing" in err, err
    err = one_sentence(*eval_cli(capsys, folder, "hub_files_task")[::2])  # a path inside the hub repository
    assert "not in the local Hugging Face cache" in err and "missing" not in err, err
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", tmp_path / "hf-cache")  # its arrow cache: ours
    code, out, err = eval_cli(capsys, folder, "rel_task")
    assert code == 0 and f"json ({tmp_path / 'data' / 'docs.jsonl'})" in out, err
