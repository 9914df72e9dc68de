"""A stopped recovery's state, so a later call resumes it: the trainable weights (LoRA or q/k rows, conv,
norm, bias), the best-on-validation copy, AdamW's moments, the step, the data generator and the history.
Written atomically as safetensors + JSON (analysis.io), never a pickle; never a model, so nothing
half-trained can be mistaken for a result."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from analysis.errors import AnalysisError
from analysis.io.trainer_state import load_trainer_state, save_trainer_state
from analysis.io.writes import can_replace, os_errors, write_model_dir

WEIGHTS = "recovery_weights.safetensors"
RECORD = "recovery.json"
KIND = "recovery state"


def save_state(folder, *, settings: dict, identity: str, config: dict, step: int, params: dict, best: dict,
               optimizer, generator: torch.Generator, record: dict) -> Path:
    """Replace `folder` (only one this project wrote) with the state after `step` completed steps; the pruned
    model's config.json goes along (it says which model the state trains, and marks a folder of ours)."""
    from safetensors.torch import save_file

    def fill(tmp: Path) -> None:
        tensors = {f"param.{n}": p.detach().cpu().contiguous() for n, p in params.items()}
        tensors |= {f"best.{n}": t.detach().cpu().contiguous() for n, t in best.items()}
        save_file(tensors, str(tmp / WEIGHTS))
        (tmp / "config.json").write_text(json.dumps(config, indent=1, default=str))
        save_trainer_state(tmp, optimizer.state_dict(), step, generator.get_state(), torch.get_rng_state())
        (tmp / RECORD).write_text(json.dumps({"settings": settings, "model_identity": identity, "step": step,
                                              **record}, indent=1))
    return write_model_dir(folder, fill, overwrite=True, kind=KIND,
                           exists_hint="choose another folder for the recovery state")


def load_state(folder, settings: dict, identity: str) -> dict:
    """The saved state, after checking it belongs to this pruned model and these settings (one sentence if not)."""
    from safetensors.torch import load_file
    folder = Path(folder)
    try:
        record = json.loads((folder / RECORD).read_text())
        tensors = load_file(str(folder / WEIGHTS))
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"The recovery state in {folder} cannot be read ({type(exc).__name__}); discard it "
                            "and start the recovery again.") from None
    if record.get("model_identity") != identity:
        raise AnalysisError(f"The recovery state in {folder} was saved for another pruned model; discard it or "
                            "prune with the same settings as before.")
    changed = [k for k, v in settings.items() if record["settings"].get(k) != v]
    if changed:
        raise AnalysisError(f"The recovery state in {folder} was saved with other settings ({', '.join(changed)}); "
                            "resume with the saved settings or discard it.")
    trainer = load_trainer_state(folder)
    return {**record, "trainer": trainer,
            "params": {k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")},
            "best": {k[len("best."):]: v for k, v in tensors.items() if k.startswith("best.")}}


def has_state(folder) -> bool:
    return folder is not None and (Path(folder) / RECORD).is_file()


def discard_state(folder) -> None:
    """Remove a saved recovery state (only a folder this project wrote)."""
    folder = Path(folder)
    if not folder.exists():
        return
    if not can_replace(folder):
        raise AnalysisError(f"{folder} is not a recovery state this tool wrote; it was left alone.")
    with os_errors("remove the recovery state in", folder):
        shutil.rmtree(folder)
