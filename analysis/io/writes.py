"""Every write of the project goes through here: model directories, JSON and text files.

Rules (never destroy what the project did not write):
- A directory is replaced only if this project wrote it as a model: it holds the marker file
  `MARKER` (which lists the files written), config.json and *.safetensors, and nothing else.
  Never the working directory or a parent of it, the project tree or a bundled sample.
- Files get normal permissions (0666 & ~umask; an existing file keeps its mode). An existing symlink is
  written through to its target; a FIFO or device is written to, never replaced.
- Every refusal and every OS error is one sentence (AnalysisError), checked before expensive work; a full
  disk while safetensors writes weights is the same sentence as for any other file.

Replacing a directory (`write_model_dir`; mechanics in `analysis.io.swap`):
1. The new directory is written as a hidden sibling `.NAME.<random>.partial` whose first file is a marker
   saying "partial"; the writer holds an flock on it, so no other command takes it for a leftover.
2. Files are fsynced, then the marker is replaced (atomically) by the final one listing every file.
3. No old NAME: `renameat2(RENAME_NOREPLACE)` publishes it. An old NAME: on Linux `renameat2(RENAME_EXCHANGE)`
   swaps the two names in one step, so NAME always holds a whole model, the old one or the new one.
4. The old model, now under the temporary name, is removed with its marker last.
Where RENAME_EXCHANGE is unavailable (another OS, some file systems) a journal `.NAME.state-rank-swap.json`
is written (and fsynced) beside NAME before two plain renames (NAME → `.NAME.replaced-<hex>`, new → NAME)
and removed after them. For the instant between them NAME is missing; the next command that writes into
the folder, or loads NAME, finishes the swap (or rolls it back when the new one is incomplete) and says so.
Every write first reclaims the folder's leftovers of interrupted writes — `.partial`, `.replaced-*` and
probe directories that carry the marker (or hold nothing but a torn one), and `write_text`'s own
`.*.state-rank-tmp` files — unless a live writer holds their lock; one stderr line lists what went.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import tempfile
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.io.marker import (MARKER, REQUIRED, TMP_FILE_SUFFIX, WRITER, kind_of,  # noqa: F401  (re-exported)
                                marker_record, show)

REPO_ROOT = Path(__file__).resolve().parents[2]   # a checkout, or the site-packages of an installed copy
SAMPLES_DIR = REPO_ROOT / "sample_models"          # `pip install .` puts the samples beside the packages too
# A checkout keeps outputs/ and .cache/ inside it; an installed copy never writes into site-packages.
CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file()
HOME_DIR = Path("~/state-rank").expanduser()       # an installed copy's outputs/ and cache/
NAME_MAX = 255     # bytes per path component (Linux)
PATH_MAX = 4095    # bytes per whole path, without the final NUL
OUTPUT_ROOT_ENV = "STATE_RANK_OUTPUT_ROOT"   # where the dashboard saves (default <repo>/outputs, ~/state-rank/outputs)
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


def os_error_sentence(exc: OSError, action: str, path) -> str:
    reason = _REASONS.get(exc.errno) or (exc.strerror or type(exc).__name__).lower()
    return f"Could not {action} {show(path)}: {reason}; choose another location."


@contextlib.contextmanager
def os_errors(action: str, path):
    """`with os_errors("save the model to", out): ...` — any OSError becomes one sentence, and so does the
    same failure inside safetensors or tokenizers (Rust), which raise their own types with the OS code inside."""
    try:
        yield
    except OSError as exc:
        raise AnalysisError(os_error_sentence(exc, action, path)) from None
    except Exception as exc:
        code = _rust_os_error(exc)
        if code is None:
            raise
        raise AnalysisError(os_error_sentence(OSError(code, os.strerror(code)), action, path)) from None


def _rust_os_error(exc: Exception) -> int | None:
    """The errno inside a SafetensorError ("IoError(Os { code: 28, ...") or a tokenizers error ("(os error 28)")."""
    if type(exc).__name__ != "SafetensorError" and type(exc) is not Exception:
        return None
    found = re.search(r"Os \{ code: (\d+)|\(os error (\d+)\)", str(exc))
    return int(found.group(1) or found.group(2)) if found else None


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


def replace_refusal(path, kind: str = "model") -> str | None:
    """Why the existing directory `path` may not be replaced by a folder of `kind` (a marker label), or None
    when this project wrote it as a complete folder of that same kind."""
    path = _absolute(path)
    reason = protected_reason(path)
    if reason:
        return reason
    if path.is_symlink():
        return "is a symbolic link"
    if not path.is_dir():
        return "is not a directory"
    record = marker_record(path)
    if record is None:
        return f"was not written by this tool (no valid {MARKER} marker)"
    found, wanted = kind_of(record.get("kind")), kind_of(kind)
    if found != wanted:
        return f"is a {found} folder this tool wrote, not a {wanted} folder"
    missing = [p for p in REQUIRED.get(wanted, ()) if not list(path.glob(p))]
    if missing:
        return f"is not a complete {wanted} folder ({' and '.join(REQUIRED[wanted])})"
    entries = set()
    for base, dirs, names in os.walk(path):
        entries |= {os.path.relpath(os.path.join(base, n), path) for n in dirs + names}
    listed = set(record["files"])
    allowed = listed | {MARKER} | {str(Path(f).parent) for f in listed if Path(f).parent != Path(".")}
    foreign = sorted(e for e in entries - allowed if not _own_temp_file(e))
    if foreign:
        return f"holds files this tool did not write ({', '.join(show(f, 30) for f in foreign[:3])})"
    return None


def _own_temp_file(name: str) -> bool:
    """A write_text temporary left by a killed write (e.g. of a model card): ours, removed with the folder."""
    return os.path.basename(name).startswith(".") and name.endswith(TMP_FILE_SUFFIX)


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
                  exists_hint: str = "choose a new directory or allow overwriting", kind: str = "model") -> Path:
    """Validate a model directory to write, before any work: its absolute path, or one sentence."""
    if out is None or not str(out).strip():
        raise AnalysisError("No output directory given; name a new directory to save the model in.")
    path = _absolute(out)
    _check_lengths(path)
    check_name_characters(path.name, "output directory's name")
    from analysis.io import swap
    swap.recover_target(path)  # an interrupted replace of this very name is finished (or undone) first
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
            check_replaceable(path, kind)
        _probe(path.parent, path)
    return path


def check_replaceable(path, kind: str = "model") -> None:
    reason = replace_refusal(path, kind)
    if reason:
        raise AnalysisError(f"Refusing to replace {show(path)}: it {reason}; choose a new directory "
                            "or remove it yourself.")


def _write_marker(folder: Path, kind: str) -> None:
    """The final marker, listing every file, replacing the "partial" one atomically."""
    record = {"written_by": WRITER, "kind": kind, "files": _written_files(folder)}
    tmp = folder / f"{MARKER}.tmp"
    with open(tmp, "w") as fh:
        fh.write(json.dumps(record, indent=2) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, file_mode())
    os.replace(tmp, folder / MARKER)


def _start_marker(folder: Path, kind: str) -> None:
    """The first file of a new directory: it says "ours, half-written", so a killed write can be reclaimed."""
    fd = os.open(folder / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode())
    try:
        os.write(fd, json.dumps({"written_by": WRITER, "kind": kind, "state": "partial", "files": []}).encode())
    finally:
        os.close(fd)


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
    """`fill(tmp)` writes the model into a marked temporary sibling, which then takes the name `out` in one
    step (see "Replacing a directory" above). An existing `out` is replaced only when `replace_refusal` finds nothing against it."""
    from analysis.io import swap
    path = check_new_dir(out, overwrite, exists_hint, kind)
    with os_errors("create the folder for", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        swap.tidy(path.parent, keep={path.name})
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=".partial"))
    lock = None
    try:
        with os_errors("write the model to", path):
            lock = swap.locked_dir(tmp)  # held until the end: no other command reclaims it meanwhile
            _start_marker(tmp, kind)
            fill(tmp)
            _normal_permissions(tmp)
            _fsync_files(tmp)
            _write_marker(tmp, kind)
            _swap_in(tmp, path, overwrite, exists_hint, kind)
    except BaseException:
        with contextlib.suppress(OSError):
            if os.path.isdir(tmp):
                swap.remove_marked(tmp)  # only ever our own temporary folder (or the old model swapped into it)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    return path


def _fsync_files(folder: Path) -> None:
    """Data on disk before the name points at it (a power cut after the swap must not leave empty files)."""
    for base, dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(base, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _normal_permissions(folder: Path) -> None:
    """mkdtemp makes 0700 and safetensors writes 0600: a saved model gets the modes of any new file/folder
    (only what differs is changed)."""
    mask = _umask()
    for base, dirs, files in os.walk(folder):
        for name, mode in [(base, 0o777)] + [(os.path.join(base, d), 0o777) for d in dirs] + \
                          [(os.path.join(base, f), 0o666) for f in files]:
            if not os.path.islink(name) and stat.S_IMODE(os.stat(name).st_mode) != mode & ~mask:
                os.chmod(name, mode & ~mask)


def _swap_in(tmp: Path, path: Path, overwrite: bool, exists_hint: str, kind: str) -> None:
    """Publish `tmp` as `path`: a new name in one rename, an existing one exchanged in one step (or journalled)."""
    from analysis.io import swap
    if not os.path.lexists(path):
        if not swap.renameat2(tmp, path, swap.RENAME_NOREPLACE):
            if os.path.lexists(path):  # (no RENAME_NOREPLACE here: check, then rename)
                raise AnalysisError(f"{path} already exists; {exists_hint}.")
            os.rename(tmp, path)
        swap.fsync_dir(path.parent)
        return
    if not overwrite:
        raise AnalysisError(f"{path} already exists; {exists_hint}.")
    check_replaceable(path, kind)  # again: it may have changed while the model was written
    if swap.renameat2(tmp, path, swap.RENAME_EXCHANGE):
        swap.fsync_dir(path.parent)
        swap.remove_old(tmp)  # the old model, now under the temporary name, verified above to be ours
    else:
        swap.journal_swap(tmp, path)


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
        from analysis.io import swap
        swap.tidy(target.parent, keep={target.name})
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:64]}.", suffix=TMP_FILE_SUFFIX)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # live: never taken for a leftover (the lock goes with the fd)
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
                os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def output_root() -> Path:
    """The one folder the dashboard saves under (env STATE_RANK_OUTPUT_ROOT, default <repo>/outputs in a checkout,
    ~/state-rank/outputs for an installed copy)."""
    default = (REPO_ROOT if CHECKOUT else HOME_DIR) / "outputs"
    return Path(os.environ.get(OUTPUT_ROOT_ENV) or default).expanduser().absolute()


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
