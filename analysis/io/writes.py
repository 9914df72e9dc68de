"""Every write of the project goes through here: model directories, JSON and text files.

Rules (never destroy what the project did not write):
- A directory is replaced only if this project wrote it as a model: it holds the marker file
  `MARKER` (which lists the files written), config.json and *.safetensors, and nothing else.
  Never the working directory or a parent of it, the project tree or a bundled sample.
- A model is written into a temporary sibling first; an old model is moved aside and removed only
  after the new one is complete and renamed into place.
- Files get normal permissions (0666 & ~umask; an existing file keeps its mode). An existing symlink is
  written through to its target; a FIFO or device is written to, never replaced.
- Every refusal and every OS error is one sentence (AnalysisError), checked before expensive work.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path

from analysis.errors import AnalysisError

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO_ROOT / "sample_models"
MARKER = ".state-rank-model.json"
WRITER = "state-rank (python -m analysis / the dashboard)"
NAME_MAX = 255     # bytes per path component (Linux)
PATH_MAX = 4095    # bytes per whole path, without the final NUL
OUTPUT_ROOT_ENV = "STATE_RANK_OUTPUT_ROOT"   # where the dashboard saves (default <repo>/outputs)
LOCAL_ENV = "STATE_RANK_LOCAL"               # 1: the dashboard may save to any local path

_REASONS = {
    errno.ENOENT: "a folder on the way does not exist",
    errno.EACCES: "permission denied",
    errno.EPERM: "the operation is not permitted there",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "it is a directory",
    errno.ELOOP: "it has a loop of symbolic links",
    errno.EXDEV: "it is on another file system",
    errno.ENXIO: "nothing is reading from it",
}


def show(path, limit: int = 80) -> str:
    """A path short enough for one sentence (a 5,000-character name is cut in the middle)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-(limit // 2):]}"


def os_error_sentence(exc: OSError, action: str, path) -> str:
    reason = _REASONS.get(exc.errno) or (exc.strerror or type(exc).__name__).lower()
    return f"Could not {action} {show(path)}: {reason}; choose another location."


@contextlib.contextmanager
def os_errors(action: str, path):
    """`with os_errors("save the model to", out): ...` — any OSError becomes one sentence."""
    try:
        yield
    except OSError as exc:
        raise AnalysisError(os_error_sentence(exc, action, path)) from None


def _umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~_umask()


def _absolute(path) -> Path:
    text = str(path)
    if "\0" in text:
        raise AnalysisError("The path contains a NUL character; type a plain path.")
    return Path(os.path.abspath(os.path.expanduser(text)))


def _check_lengths(path: Path) -> None:
    for part in path.parts:
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise AnalysisError(f"The name {show(part, 40)} is {len(part)} characters long; "
                                f"file names can have at most {NAME_MAX} bytes, so choose a shorter one.")
    if len(str(path).encode("utf-8", "surrogateescape")) > PATH_MAX:
        raise AnalysisError(f"The path {show(path)} is longer than {PATH_MAX} bytes; choose a shorter one.")


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def protected_reason(path) -> str | None:
    """Why `path` must never be replaced regardless of what it holds, or None."""
    real = Path(os.path.realpath(_absolute(path)))
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        cwd = None
    if cwd is not None and _is_within(cwd, real):
        return "is the working directory or one of its parents"
    if _is_within(REPO_ROOT, real):
        return "holds this project"
    if _is_within(real, SAMPLES_DIR.resolve()):
        return "is a bundled sample (inside sample_models/)"
    return None


def _written_files(folder: Path) -> list[str]:
    files = []
    for base, dirs, names in os.walk(folder):
        files += [os.path.relpath(os.path.join(base, n), folder) for n in names]
    return sorted(f for f in files if f != MARKER)


def replace_refusal(path) -> str | None:
    """Why the existing directory `path` may not be replaced, or None when this project wrote it as a model."""
    path = _absolute(path)
    reason = protected_reason(path)
    if reason:
        return reason
    if path.is_symlink():
        return "is a symbolic link"
    if not path.is_dir():
        return "is not a directory"
    marker = path / MARKER
    try:
        record = json.loads(marker.read_text())
        listed = set(record["files"])
        assert record.get("written_by") == WRITER
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return f"was not written by this tool (no valid {MARKER} marker)"
    if not (path / "config.json").is_file() or not list(path.glob("*.safetensors")):
        return "is not a complete model directory (config.json and *.safetensors)"
    entries = set()
    for base, dirs, names in os.walk(path):
        entries |= {os.path.relpath(os.path.join(base, n), path) for n in dirs + names}
    allowed = listed | {MARKER} | {str(Path(f).parent) for f in listed if Path(f).parent != Path(".")}
    foreign = sorted(entries - allowed)
    if foreign:
        return f"holds files this tool did not write ({', '.join(show(f, 30) for f in foreign[:3])})"
    return None


def can_replace(path) -> bool:
    return replace_refusal(path) is None


def _probe(folder: Path, what: Path) -> None:
    """Create and remove an empty folder in the nearest existing ancestor: can `what` be written at all?"""
    ancestor = folder
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise AnalysisError(f"{show(ancestor)} is a file, so {show(what)} cannot be created under it; "
                            "choose a path inside a directory.")
    try:
        os.rmdir(tempfile.mkdtemp(dir=ancestor, prefix=".state-rank-probe-"))
    except OSError as exc:
        reason = "it does not accept new folders" if exc.errno == errno.ENOENT else \
            _REASONS.get(exc.errno) or (exc.strerror or "").lower()
        raise AnalysisError(f"Cannot write {show(what)}: nothing can be created in {show(ancestor)} "
                            f"({reason}); choose a writable directory.") from None


def check_new_dir(out, overwrite: bool = False,
                  exists_hint: str = "choose a new directory or allow overwriting") -> Path:
    """Validate a model directory to write, before any work: its absolute path, or one sentence."""
    if out is None or not str(out).strip():
        raise AnalysisError("No output directory given; name a new directory to save the model in.")
    path = _absolute(out)
    _check_lengths(path)
    check_name_characters(path.name, "output directory's name")
    reason = protected_reason(path) if os.path.lexists(path) else None  # new folders may go anywhere writable
    if reason:
        raise AnalysisError(f"Refusing to write the model to {show(path)}: it {reason}; choose a new directory.")
    with os_errors("check", path):
        if path.is_symlink():
            raise AnalysisError(f"{show(path)} is a symbolic link, which is never replaced; choose a new directory.")
        if path.exists():
            if not path.is_dir():
                raise AnalysisError(f"{show(path)} is a file, not a directory; choose a new directory "
                                    "(files are never replaced).")
            if not overwrite:
                raise AnalysisError(f"{path} already exists; {exists_hint}.")
            check_replaceable(path)
        _probe(path.parent, path)
    return path


def check_replaceable(path) -> None:
    reason = replace_refusal(path)
    if reason:
        raise AnalysisError(f"Refusing to replace {show(path)}: it {reason}; choose a new directory "
                            "or remove it yourself.")


def _write_marker(folder: Path, kind: str) -> None:
    record = {"written_by": WRITER, "kind": kind, "files": _written_files(folder)}
    (folder / MARKER).write_text(json.dumps(record, indent=2) + "\n")


def record_written(folder, names: list[str]) -> None:
    """Files this project added to a model directory it wrote (e.g. a model card): keep them replaceable."""
    marker = Path(folder) / MARKER
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return  # not a directory this project wrote: nothing to record
    record["files"] = sorted(set(record["files"]) | set(names))
    write_text(marker, json.dumps(record, indent=2) + "\n")


def write_model_dir(out, fill, overwrite: bool = False, kind: str = "model",
                    exists_hint: str = "choose a new directory or allow overwriting") -> Path:
    """`fill(tmp)` writes the model into a temporary sibling; then it is marked and renamed to `out`.

    An existing `out` is replaced only when `can_replace` allows it: moved aside, and removed only after
    the new directory is in place (put back if the rename fails)."""
    path = check_new_dir(out, overwrite, exists_hint)
    with os_errors("create the folder for", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".partial"))
    try:
        with os_errors("write the model to", path):
            fill(tmp)
            _normal_permissions(tmp)
            _write_marker(tmp, kind)
            _swap_in(tmp, path, overwrite, exists_hint)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # only ever our own temporary folder
        raise
    return path


def _normal_permissions(folder: Path) -> None:
    """mkdtemp makes 0700 and safetensors writes 0600: a saved model gets the modes of any new file/folder."""
    mask = _umask()
    os.chmod(folder, 0o777 & ~mask)
    for base, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(base, name), 0o777 & ~mask)
        for name in files:
            if not os.path.islink(os.path.join(base, name)):
                os.chmod(os.path.join(base, name), 0o666 & ~mask)


def _swap_in(tmp: Path, path: Path, overwrite: bool, exists_hint: str) -> None:
    if not os.path.lexists(path):
        os.rename(tmp, path)
        return
    if not overwrite:
        raise AnalysisError(f"{path} already exists; {exists_hint}.")
    check_replaceable(path)  # again: it may have changed while the model was written
    aside = path.with_name(f".{path.name[:64]}.replaced-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(aside, path)
        raise
    shutil.rmtree(aside, ignore_errors=True)  # verified above to be a model this project wrote


def check_file_destination(destination, label: str = "--json") -> None:
    """Validate a file to write (e.g. --json PATH) before any work: not a directory, creatable, short enough."""
    if destination == "-":
        return
    path = _absolute(destination)
    _check_lengths(path)
    with os_errors("check", path):
        if path.is_dir():
            raise AnalysisError(f"{label} {show(path)} is a directory; give a file path (or - for stdout).")
        if path.exists() and (not stat.S_ISREG(os.stat(path).st_mode) or _kernel_path(path)):
            return  # a FIFO or device (or /dev/stdout): written to as it is
        _probe(path.parent, path)


def _kernel_path(path: Path) -> bool:
    """Does `path` (or a link on the way to it) lead through /dev or /proc, as /dev/stdout does? Such a file
    is written into, never replaced (/dev/stdout redirected to a file is a regular file)."""
    hop = str(path)
    for _ in range(40):
        if hop.startswith(("/dev/", "/proc/")):
            return True
        if not os.path.islink(hop):
            return False
        hop = os.path.join(os.path.dirname(hop), os.readlink(hop))
    return False


def write_text(destination, text: str, label: str = "--json") -> Path:
    """Write `text` atomically (temp file + rename) with normal permissions; see the module rules."""
    check_file_destination(destination, label)
    path = _absolute(destination)
    with os_errors("write", path):
        try:
            info = os.stat(path)  # follows symlinks
        except FileNotFoundError:
            info = None
        if info is not None and (not stat.S_ISREG(info.st_mode) or _kernel_path(path)):
            with open(path, "a") as fh:  # a FIFO, a device, or /dev/stdout redirected to a file: write into it
                fh.write(text)
            return path
        target = Path(os.path.realpath(path)) if path.is_symlink() else path  # keep the link, write its target
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(info.st_mode) if info is not None else file_mode()
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:64]}.", suffix=".tmp")
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def output_root() -> Path:
    """The one folder the dashboard saves under (env STATE_RANK_OUTPUT_ROOT, default <repo>/outputs)."""
    return Path(os.environ.get(OUTPUT_ROOT_ENV) or REPO_ROOT / "outputs").expanduser().absolute()


def local_paths_allowed() -> bool:
    """STATE_RANK_LOCAL=1: the dashboard runs for its own user, who may save to any local path."""
    return os.environ.get(LOCAL_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def check_name_characters(text: str, what: str = "name") -> None:
    """Refuse invisible characters in a name the tool creates: controls (Cc), formats (Cf: a right-to-left
    override makes the name display reversed, here and in every file manager) and line/paragraph separators."""
    import unicodedata
    for char in str(text):
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            name = unicodedata.name(char, "") or "a control character"
            raise AnalysisError(f"The {what} contains an invisible character (U+{ord(char):04X}, {name}), which "
                                "would hide or reorder what it shows; type it with visible characters only.")


def output_target(text: str, local: bool | None = None) -> Path:
    """The dashboard's Save field → a directory: a folder name under `output_root()`, or (local mode)
    any path, a relative one taken under the output root."""
    local = local_paths_allowed() if local is None else local
    text = (text or "").strip()
    if not text:
        raise AnalysisError("Give a name for the saved model.")
    if "\0" in text:
        raise AnalysisError("The name contains a NUL character; type a plain folder name.")
    check_name_characters(text)
    if local:
        path = Path(text).expanduser()
        return path if path.is_absolute() else output_root() / path
    if "/" in text or "\\" in text or text.startswith(".") or text.startswith("~"):
        raise AnalysisError(f"Give a folder name, not a path: models are saved under {output_root()} "
                            f"(set {LOCAL_ENV}=1 when the dashboard runs for you alone to allow any path).")
    if len(text.encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise AnalysisError(f"The name is {len(text)} characters long; folder names can have at most "
                            f"{NAME_MAX} bytes, so choose a shorter one.")
    return output_root() / text
