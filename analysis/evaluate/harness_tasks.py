"""Which lm-evaluation-harness tasks a request names, and whether their data can be read here.

Three sources, as lm-eval's own CLI has them: the **local tasks** shipped in sample_models/tasks/ (YAML + JSONL built
from the bundled texts by build_tasks.py; no network ever), the harness's own registry (its data sets come from the
Hugging Face cache or the hub), and a user's `--include-path` folder of task YAMLs. A data set that is neither cached
nor reachable is one sentence naming the local tasks, never a traceback or a hang: when the hub does not answer
within a few seconds, the data sets are read in the libraries' offline mode (cache only).

lm_eval is imported inside the functions only: `python -m analysis --help` stays fast.
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.evaluate import task_yaml

LOCAL_DIR = Path(__file__).resolve().parents[2] / "sample_models" / "tasks"
MANIFEST = "tasks.json"
HUB_TIMEOUT_S = 3.0
_offline_lock = threading.Lock()


@dataclass(frozen=True)
class LocalTask:
    name: str
    what: str          # how it is built, in one line
    docs: int          # test docs
    fewshot_docs: int
    source: str
    chance: float
    chance_note: str
    recall_keys: int | None   # an associative-recall task: the key count of its words (k1..kN)


@functools.lru_cache(maxsize=1)
def local_tasks() -> dict[str, LocalTask]:
    """The local tasks, from the manifest build_tasks.py writes beside them."""
    path = LOCAL_DIR / MANIFEST
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise AnalysisError(f"{path} is missing or unreadable; rebuild the local tasks with "
                            "sample_models/tasks/build_tasks.py.") from None
    fields = LocalTask.__dataclass_fields__
    return {name: LocalTask(name=name, **{k: v for k, v in row.items() if k in fields}) for name, row in rows.items()}


def local_names() -> str:
    return ", ".join(local_tasks())


def check_include_path(path: str | None) -> Path | None:
    if path is None:
        return None
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise AnalysisError(f"--include-path {path} is not a folder; give the folder that holds your task YAML files.")
    return folder.resolve()


def task_manager(names: tuple[str, ...], include_path: str | None = None):
    """lm-eval's TaskManager over the local tasks (+ the user's folder, whose YAMLs must all parse); the harness's
    own registry (about 15,000 YAML files, several seconds to index) only when a name is in neither."""
    from lm_eval.tasks import TaskManager
    folder = check_include_path(include_path)
    if folder is not None:
        task_yaml.check_folder(folder)  # lm-eval would skip a broken YAML silently: its task would be "unknown"
    paths = [str(LOCAL_DIR)] + ([str(folder)] if folder is not None else [])
    manager = TaskManager(include_path=paths, include_defaults=False)
    if any(name not in manager.all_tasks for name in names):
        manager = TaskManager(include_path=paths, include_defaults=True)
    unknown = [name for name in names if name not in manager.all_tasks]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, manager.all_tasks, n=5, cutoff=0.6)
        near = f"close names: {', '.join(close)}; " if close else ""
        raise AnalysisError(f"Unknown task {name!r} ({near}the local tasks, which need no network: {local_names()}; "
                            "your own task YAMLs: --include-path DIR).")
    return manager


def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether the Hugging Face hub answers a TCP connect within `timeout` (and offline mode is not set)."""
    from urllib.parse import urlparse

    from huggingface_hub import constants
    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def cache_only():
    """The datasets and huggingface_hub libraries in offline mode (the cache or an immediate error, no waiting on
    a network that does not answer); restored afterwards."""
    import datasets
    from huggingface_hub import constants
    with _offline_lock:
        before = (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
        datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
        try:
            yield
        finally:
            datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = before


def trusted_folders() -> tuple[Path, ...]:
    """Task YAMLs whose `!function`s are code the user installed: the local tasks and the harness's own."""
    import lm_eval
    return LOCAL_DIR.resolve(), Path(lm_eval.__file__).resolve().parent


def task_code(manager, names) -> list:
    """The `!function`s of the user's task YAMLs that loading `names` would run (analysis.evaluate.task_yaml)."""
    return task_yaml.requested_code(manager, names, trusted_folders())


def load_one(manager, name: str, reachable: bool):
    """The harness object a name builds (a Task, a Group, or a tag's list of Tasks), its data read."""
    local = name in local_tasks()
    entry = manager.task_index.get(name)
    if not local and entry is not None and entry.cfg:
        missing = task_yaml.missing_data(name, entry.cfg, entry.yaml_path)
        if missing:  # before the datasets library mistakes it for a data set the hub would have
            raise AnalysisError(missing)
    try:
        with contextlib.nullcontext() if local or reachable else cache_only():
            loaded = manager.load([name])
    except AnalysisError:
        raise
    except Exception as exc:  # the harness and datasets raise many types; each becomes one sentence
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        data = (entry.cfg or {}).get("dataset_path") if entry is not None else None
        where = f" ({data})" if data else ""
        gone = task_yaml.missing_file_in(exc)
        if gone is not None:
            yaml_at = f", named by {entry.yaml_path}" if entry is not None and entry.yaml_path else ""
            raise AnalysisError(f"Task {name} cannot read its data: the file {gone} is missing{yaml_at}; put it "
                                "there or correct the task's YAML (or its loader).") from None
        if not local and (not reachable or _is_network_error(exc)):
            raise AnalysisError(f"The data set of task {name}{where} is not in the local Hugging Face cache and the "
                                "hub cannot be reached from here; run it once where the hub is reachable (it is cached "
                                f"then), or use a local task: {local_names()}.") from None
        raise AnalysisError(f"lm-evaluation-harness could not build task {name}{where} ({type(exc).__name__}: "
                            f"{first}); check the task's YAML and data.") from None
    return loaded["groups"].get(name) or loaded["tasks"].get(name) or list(loaded["tasks"].values())


def dataset_label(config) -> str:
    """What a task's docs are read from, by name: the data set (and its subset and local files), or for a
    `custom_dataset` the Python function that builds them, its file and its arguments."""
    kwargs = config.dataset_kwargs if isinstance(config.dataset_kwargs, dict) else {}
    builder = config.custom_dataset
    if callable(builder):
        import inspect
        try:
            where = inspect.getsourcefile(builder) or "?"
        except TypeError:
            where = getattr(builder, "__module__", "?")
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        return f"custom_dataset {getattr(builder, '__name__', builder)}({args}) from {where}"
    label = str(config.dataset_path) + (f"/{config.dataset_name}" if config.dataset_name else "")
    files = task_yaml.local_files(kwargs.get("data_files"))
    if task_yaml.is_file_builder(str(config.dataset_path)):  # read from the working directory: say which file
        files = [os.path.abspath(os.path.expanduser(f)) for f in files]
    return label + (f" ({', '.join(files)})" if files else "")


def _is_network_error(exc: BaseException) -> bool:
    names = " ".join(type(e).__name__ for e in _chain(exc))
    return isinstance(exc, (ConnectionError, TimeoutError)) or any(
        word in names for word in ("Connection", "Offline", "Timeout", "LocalEntryNotFound"))


def _chain(exc: BaseException):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def leaf_tasks(objects) -> dict:
    """name → Task for every task an object list holds (groups and tags expanded)."""
    from lm_eval.api.task import Task
    out = {}
    for obj in objects:
        if isinstance(obj, list):
            out.update(leaf_tasks(obj))
        elif isinstance(obj, Task):
            out[obj.task_name] = obj
        else:
            out.update({t.task_name: t for t in obj.get_all_tasks()})
    return out


def docs_hash(task, num_fewshot: int | None) -> str:
    """sha256 of what a task reads: its YAML-level settings and every doc it scores (and its few-shot pool when
    few-shot examples are drawn), so other data or another prompt never serves a cached number."""
    h = hashlib.sha256()
    config = task.config
    fields = ("output_type", "doc_to_text", "doc_to_target", "doc_to_choice", "target_delimiter",
              "fewshot_delimiter", "metric_list", "test_split", "validation_split", "fewshot_split")
    h.update(json.dumps({f: _plain(getattr(config, f, None)) for f in fields}, sort_keys=True, default=_plain).encode())
    pools = [task.eval_docs] + ([task.fewshot_docs()] if num_fewshot else [])
    for docs in pools:
        for doc in docs:
            h.update(json.dumps(doc, sort_keys=True, default=str).encode())
            h.update(b"\n")
    return h.hexdigest()


def _plain(value):
    if callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__name__)}"
    return value


def fewshot_pool(task) -> int:
    """How many few-shot examples a task can draw."""
    docs = task.fewshot_docs()
    return len(docs) if docs is not None else 0
