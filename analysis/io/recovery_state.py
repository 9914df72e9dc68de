"""A stopped recovery's state, so a later call resumes it: the trainable weights (LoRA or q/k rows, conv,
norm, bias), the best-on-validation copy, AdamW's moments, the step, the data generator and the history.
Written atomically as safetensors + JSON (analysis.io), never a pickle; never a model, so nothing
half-trained can be mistaken for a result. Its folder's marker says "recovery state": only such a folder is
ever replaced by a newer state or discarded, and `--recover-state` names a new folder or one of these."""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from analysis.errors import AnalysisError
from analysis.io import swap
from analysis.io.trainer_state import load_trainer_state, save_trainer_state
from analysis.io.writes import check_new_dir, os_errors, replace_refusal, show, write_model_dir

WEIGHTS = "recovery_weights.safetensors"
RECORD = "recovery.json"
KIND = "recovery state"
HINT = "give a new folder (or one where this tool saved a stopped recovery), so nothing of yours is replaced or deleted"


def check_state_folder(folder, label: str = "--recover-state") -> Path:
    """Before any work: `folder` is a new folder or a recovery state this tool wrote; a model folder, a
    training or card folder, a foreign folder, a file, a link or a FIFO is refused in one sentence."""
    path = Path(os.path.abspath(os.path.expanduser(str(folder))))
    if os.path.lexists(path):
        if path.is_symlink():
            raise AnalysisError(f"{label} {show(path)} is a symbolic link; {HINT}.")
        if not path.is_dir():
            raise AnalysisError(f"{label} {show(path)} is not a folder; {HINT}.")
        reason = replace_refusal(path, KIND)
        if reason:
            raise AnalysisError(f"{label} {show(path)} {reason}; {HINT}.")
    return check_new_dir(path, overwrite=True, exists_hint=HINT, kind=KIND)  # lengths, characters, writable


def save_state(folder, *, settings: dict, identity: str, config: dict, step: int, params: dict, best: dict,
               optimizer, generator: torch.Generator, record: dict, context: dict | None = None) -> Path:
    """Replace `folder` (only a recovery state this project wrote) with the state after `step` completed steps;
    the pruned model's config.json goes along (it says which model the state trains). `context`: what the
    caller pruned (model, strategy, ratios, ...), checked before a resume's work starts."""
    from safetensors.torch import save_file

    def fill(tmp: Path) -> None:
        tensors = {f"param.{n}": p.detach().cpu().contiguous() for n, p in params.items()}
        tensors |= {f"best.{n}": t.detach().cpu().contiguous() for n, t in best.items()}
        save_file(tensors, str(tmp / WEIGHTS))
        (tmp / "config.json").write_text(json.dumps(config, indent=1, default=str))
        save_trainer_state(tmp, optimizer.state_dict(), step, generator.get_state(), torch.get_rng_state())
        (tmp / RECORD).write_text(json.dumps({"settings": settings, "context": context or {},
                                              "model_identity": identity, "step": step, **record}, indent=1))
    return write_model_dir(folder, fill, overwrite=True, kind=KIND,
                           exists_hint="choose another folder for the recovery state")


def _record(folder: Path) -> dict:
    try:
        record = json.loads((folder / RECORD).read_text())
        if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
            raise ValueError("no settings")
        return record
    except (OSError, ValueError, RecursionError) as exc:
        raise AnalysisError(f"The recovery state in {show(folder)} cannot be read ({type(exc).__name__}); discard it "
                            "and start the recovery again.") from None


def differences(folder, settings: dict, context: dict | None = None) -> list[str]:
    """What differs between the saved state's settings (and pruning context) and these, as 'name: saved → now'."""
    record = _record(Path(folder))
    saved = {**record["settings"], **(record.get("context") or {})}
    now = {**settings, **(context or {})}
    return [f"{k}: {saved.get(k)!r} → {v!r}" for k, v in now.items() if saved.get(k) != v]


def check_resumable(folder, settings: dict, context: dict | None = None) -> None:
    """Before any work: the state in `folder` was saved for these settings and this pruning, or one sentence."""
    changed = differences(folder, settings, context)
    if changed:
        raise AnalysisError(f"The recovery state in {show(folder)} was saved with other settings "
                            f"({'; '.join(changed)}); resume with the saved settings, add --recover-discard to "
                            "start over, or choose another --recover-state folder.")


def load_state(folder, settings: dict, identity: str, context: dict | None = None) -> dict:
    """The saved state, after checking it belongs to this pruned model and these settings (one sentence if not)."""
    from safetensors.torch import load_file
    folder = Path(folder)
    record = _record(folder)
    if record.get("model_identity") != identity:
        raise AnalysisError(f"The recovery state in {folder} was saved for another pruned model; discard it or "
                            "prune with the same settings as before.")
    check_resumable(folder, settings, context)
    try:
        tensors = load_file(str(folder / WEIGHTS))
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"The recovery state in {folder} cannot be read ({type(exc).__name__}); discard it "
                            "and start the recovery again.") from None
    trainer = load_trainer_state(folder)
    return {**record, "trainer": trainer,
            "params": {k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")},
            "best": {k[len("best."):]: v for k, v in tensors.items() if k.startswith("best.")}}


def has_state(folder) -> bool:
    return folder is not None and (Path(folder) / RECORD).is_file()


def discard_state(folder) -> None:
    """Remove a saved recovery state: only a folder whose marker says this tool wrote it as a recovery state."""
    folder = Path(os.path.abspath(folder))
    swap.tidy(folder.parent, keep={folder.name})  # a discard killed half-way left a marked leftover: reclaimed
    if not os.path.lexists(folder):
        return
    reason = replace_refusal(folder, KIND)
    if reason:
        raise AnalysisError(f"{show(folder)} {reason}, so it was left alone; {HINT}.")
    with os_errors("remove the recovery state in", folder):
        swap.discard(folder)


def finish_state(folder) -> None:
    """A recovery finished: its stopped state is removed (only a recovery state this tool wrote; anything else
    at that name is left alone) and the leftovers of an interrupted discard are reclaimed."""
    folder = Path(os.path.abspath(folder))
    if os.path.lexists(folder) and replace_refusal(folder, KIND) is not None:
        return
    discard_state(folder)
