"""A saved model directory as zip bytes, for a browser download: same files → same bytes.

Entries are sorted and stamped with a fixed date and mode, so a zip can be compared or cached by
content; they sit under the directory's own name, so unzipping yields one folder.
"""
from __future__ import annotations

import io
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from analysis.errors import AnalysisError

FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date zip can store


def zip_directory(path) -> bytes:
    """Every regular file under `path` (recursively, symlinks skipped), deflated, in sorted order."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise AnalysisError(f"{root} is not a directory; save the model before downloading it.")
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for file in files:
            info = zipfile.ZipInfo(f"{root.name}/{file.relative_to(root).as_posix()}", date_time=FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, file.read_bytes())
    return buffer.getvalue()


def carry_recall_task(source, out) -> None:
    """Copy a recall model's training.json (its task) beside the pruned weights, so they load as a recall model."""
    src = Path(source or "") / "training.json"
    if src.is_file() and json.loads(src.read_text()).get("task") == "recall":
        shutil.copyfile(src, Path(out) / "training.json")


def model_zip(model, name: str, tokenizer=None, metadata: dict | None = None, source=None) -> bytes:
    """save_pretrained into a throw-away directory named `name`, zipped (the model itself is not changed)."""
    from analysis.io.model_dir import save_model
    with tempfile.TemporaryDirectory() as tmp:
        out = save_model(model, Path(tmp) / name, tokenizer=tokenizer, metadata=metadata,
                         extra=lambda folder: carry_recall_task(source, folder))
        return zip_directory(out)
