"""A user's `--include-path` folder of lm-eval task YAMLs, read before the harness reads it (issue 41, probe rows 2–4).

lm-eval's task index skips a YAML that does not parse (its task then is just "unknown"), and when it loads a task
it imports and runs every `!function` Python file the YAML names. Here the folder is read first with a loader that
runs nothing: a YAML that does not parse is one sentence with its file and line; the Python files the requested
tasks would run are listed (refused unless the user allowed task code, and then named before they run); and a
local data file the YAML names that is not there is named as missing.

Only the user's files are checked: the project's local tasks (sample_models/tasks/) and the harness's own registry
are code the user installed.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from analysis.errors import AnalysisError

SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}   # as lm-eval's task index walks a folder
ALLOW_FLAG = "--allow-task-code"


@dataclass(frozen=True)
class TaskCode:
    """One `!function` a task YAML names: the YAML, the reference as written, and what it would run."""
    yaml: Path
    reference: str          # e.g. "utils.process_docs"
    runs: str               # the Python file beside the YAML, or "installed module X"

    def sentence(self) -> str:
        return f"{self.runs} (`!function {self.reference}` in {self.yaml})"


class _Function(str):
    """A `!function` tag's value, kept as text: nothing is imported while reading."""


def _loader():
    import yaml
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # a fresh class: the constructor below is not added to PyYAML's shared SafeLoader
        pass

    Loader.add_constructor("!function", lambda loader, node: _Function(loader.construct_scalar(node)))
    return Loader


def read_yaml(path: Path) -> object:
    """The YAML at `path` parsed without running anything; a parse error is one sentence with its file and line."""
    import yaml
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"The task YAML {path} cannot be read ({exc}); fix it or move it out of the "
                            "--include-path folder.") from None
    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 (a safe loader plus one inert tag)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise AnalysisError(f"The task YAML {path} does not parse{where} ({what}); fix it (lm-evaluation-harness "
                            "would skip it, and its task would be unknown).") from None


def yaml_files(folder: Path) -> list[Path]:
    """Every *.yaml under `folder`, as lm-eval's index finds them."""
    return sorted((p for p in folder.glob("**/*.yaml") if not SKIP_DIRS.intersection(p.parts)),
                  key=lambda p: p.as_posix())


def check_folder(folder: Path) -> None:
    """Every task YAML of the user's folder parses (one sentence with the file and line for the first that does not)."""
    for path in yaml_files(folder):
        cfg = read_yaml(path)
        if not isinstance(cfg, dict):
            raise AnalysisError(f"The task YAML {path} holds {type(cfg).__name__ if cfg is not None else 'nothing'}, "
                                "not a task's settings (a mapping such as `task: NAME`); fix it or move it out of "
                                "the --include-path folder.")


def _functions(value) -> list[str]:
    if isinstance(value, _Function):
        return [str(value)]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _functions(v)]
    if isinstance(value, list):
        return [f for v in value for f in _functions(v)]
    return []


def _includes(cfg: dict, path: Path) -> list[Path]:
    names = cfg.get("include") or []
    return [Path(n) if Path(n).is_absolute() else path.parent / n for n in (names if isinstance(names, list) else
                                                                            [names]) if isinstance(n, str)]


def _runs(reference: str, yaml_dir: Path) -> str:
    """What lm-eval would import for `reference` (its rule: a .py beside the YAML first, else an importable module)."""
    module, _, _ = reference.rpartition(".")
    beside = yaml_dir / f"{module.replace('.', '/')}.py"
    return str(beside.resolve()) if beside.exists() else f"installed module {module or reference}"


def file_code(path: Path, trusted: tuple[Path, ...], seen: set | None = None) -> list[TaskCode]:
    """The `!function`s a task YAML names, its `include`s followed (files under `trusted` folders skipped)."""
    path = path.expanduser().resolve()
    seen = set() if seen is None else seen
    if path in seen or any(path.is_relative_to(t) for t in trusted) or not path.is_file():
        return []
    seen.add(path)
    cfg = read_yaml(path)
    if not isinstance(cfg, dict):
        return []
    found = [TaskCode(path, ref, _runs(ref, path.parent)) for ref in dict.fromkeys(_functions(cfg))]
    for inc in _includes(cfg, path):
        found += file_code(inc, trusted, seen)
    return found


def requested_code(manager, names, trusted: tuple[Path, ...]) -> list[TaskCode]:
    """The `!function`s the requested tasks (groups and tags expanded) would run, from files outside `trusted`."""
    found, seen, todo, done = [], set(), list(names), set()
    while todo:
        name = todo.pop(0)
        if not isinstance(name, str) or name in done:
            continue
        done.add(name)
        entry = manager.task_index.get(name)
        if entry is None:
            continue
        if entry.yaml_path is not None:
            found += file_code(Path(entry.yaml_path), trusted, seen)
        todo += sorted(entry.tags or ())                       # a tag: its tasks
        members = (entry.cfg or {}).get("task") if entry.kind.name == "GROUP" else None
        for member in members if isinstance(members, list) else []:
            todo.append(member.get("task") if isinstance(member, dict) else member)
    return list(dict.fromkeys(found))


def refuse_code(code: list[TaskCode], names) -> None:
    """Task code is never run unless allowed: one sentence naming the first YAML and the Python it would run."""
    if not code:
        return
    more = f" (and {len(code) - 1} more `!function`s)" if len(code) > 1 else ""
    which = ", ".join(names)
    raise AnalysisError(f"Task {which} would run Python code: {code[0].sentence()}{more}; read it, and if you trust "
                        f"it, pass {ALLOW_FLAG} to run it.")


def announce_code(code: list[TaskCode]) -> list[str]:
    """The lines said on stderr before allowed task code runs."""
    return [f"running task code ({ALLOW_FLAG}): {c.sentence()}" for c in code]


# ---- local data files ---------------------------------------------------------------------------------------

def _local(path: str) -> bool:
    return "://" not in path and not path.startswith("hf:")


def _data_files(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _data_files(v)]
    if isinstance(value, list):
        return [f for v in value for f in _data_files(v)]
    return []


def local_files(data_files) -> list[str]:
    """The local paths of a YAML's `data_files` (a path, a list, or split → path(s))."""
    return [f for f in _data_files(data_files) if _local(f)]


def is_file_builder(name: str) -> bool:
    """Is `name` one of the datasets library's file builders (json, csv, parquet, text, …)?"""
    try:
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES
    except ImportError:  # a datasets release that moved it: the common ones
        return name in ("json", "csv", "parquet", "text", "arrow", "pandas", "webdataset", "xml")
    return name in _PACKAGED_DATASETS_MODULES


def missing_data(name: str, cfg: dict, yaml_path) -> str | None:
    """One sentence when a task's YAML names a local data file that is not there: a local `dataset_path` folder, or
    the `dataset_kwargs: data_files` of a file builder (json, csv, …; relative paths from the working directory, as
    the datasets library reads them) or of a local folder (relative to it); None otherwise (a hub data set's
    data_files are paths inside its repository)."""
    kwargs = cfg.get("dataset_kwargs") if isinstance(cfg.get("dataset_kwargs"), dict) else {}
    dataset_path = cfg.get("dataset_path")
    if not isinstance(dataset_path, str):
        return None
    named, base = [], None
    if dataset_path.startswith(("/", "./", "../", "~")):
        named.append(dataset_path)
        base = os.path.expanduser(dataset_path)
    if base is not None or is_file_builder(dataset_path):
        named += [os.path.join(base, f) if base else f for f in local_files(kwargs.get("data_files"))]
    where = f" (named in {yaml_path})" if yaml_path else ""
    for f in named:
        full = os.path.abspath(os.path.expanduser(f))
        there = glob.glob(full) if glob.has_magic(full) else os.path.exists(full)
        if not there:
            return (f"The data file {full} of task {name}{where} is missing; put it there or correct the path in the "
                    "task's YAML (a relative path is read from the working directory).")
    return None


def _in_hf_cache(path: str) -> bool:
    """Is `path` inside the Hugging Face caches (a hub data set's files, not one the user's YAML named)?"""
    import datasets
    from huggingface_hub import constants
    caches = (datasets.config.HF_DATASETS_CACHE, constants.HF_HUB_CACHE, constants.HF_HOME)
    return any(Path(path).is_relative_to(Path(c).expanduser()) for c in caches if c)


def missing_file_in(exc: BaseException) -> str | None:
    """The local file a FileNotFoundError in `exc`'s chain names: the user's loader's open() (its filename), or the
    datasets library's "Unable to find '/abs/path'". A data set missing from the hub cache (the datasets library's
    DatasetNotFoundError is a FileNotFoundError too) names no local path: None."""
    while exc is not None:
        if isinstance(exc, FileNotFoundError):
            if exc.filename:
                return os.path.abspath(str(exc.filename))
            quoted = str(exc).split("'")
            if len(quoted) >= 3 and os.path.isabs(quoted[1]) and not _in_hf_cache(quoted[1]):
                return quoted[1]
        exc = exc.__cause__ or exc.__context__
    return None
