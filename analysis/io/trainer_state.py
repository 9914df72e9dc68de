"""Optimizer, step and RNG state of a training checkpoint as safetensors + JSON: loading it runs no code.

(The former trainer_state.pt was a pickle that was fully unpickled on `train --resume`, so a crafted
file ran arbitrary code. Such a legacy file is now read with weights_only=True, or refused.)
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from analysis.errors import AnalysisError

TENSORS = "trainer_state.safetensors"
SCALARS = "trainer_state.json"
LEGACY = "trainer_state.pt"
FORMAT = 1


def save_trainer_state(folder: Path, optimizer_state: dict, step: int, generator_state: torch.Tensor,
                       torch_rng_state: torch.Tensor) -> None:
    from safetensors.torch import save_file
    tensors = {"generator": generator_state, "torch_rng": torch_rng_state}
    scalars = {}
    for index, entry in optimizer_state["state"].items():
        for name, value in entry.items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{name}"] = value
    save_file(tensors, str(folder / TENSORS))
    (folder / SCALARS).write_text(json.dumps({"format": FORMAT, "step": step, "state_scalars": scalars,
                                              "param_groups": optimizer_state["param_groups"]}, indent=1))


def load_trainer_state(folder: Path) -> dict:
    """{"optimizer": state_dict, "step", "generator", "torch_rng"} from a checkpoint folder, without unpickling."""
    folder = Path(folder)
    if (folder / TENSORS).is_file() and (folder / SCALARS).is_file():
        return _load_safetensors(folder)
    if (folder / LEGACY).is_file():
        return _load_legacy(folder / LEGACY)
    raise AnalysisError(f"{folder} has no trainer state ({TENSORS} and {SCALARS}); start without --resume.")


def _load_safetensors(folder: Path) -> dict:
    from safetensors.torch import load_file
    try:
        tensors = load_file(str(folder / TENSORS))
        meta = json.loads((folder / SCALARS).read_text())
        groups = [{k: (tuple(v) if isinstance(v, list) and k != "params" else v) for k, v in group.items()}
                  for group in meta["param_groups"]]
        state: dict = {}
        for key, value in tensors.items():
            if key.startswith("optimizer."):
                index, name = key[len("optimizer."):].split(".", 1)
                state.setdefault(int(index), {})[name] = value
        for key, value in meta["state_scalars"].items():
            index, name = key.split(".", 1)
            state.setdefault(int(index), {})[name] = value
        return {"optimizer": {"state": state, "param_groups": groups}, "step": int(meta["step"]),
                "generator": tensors["generator"], "torch_rng": tensors["torch_rng"]}
    except Exception as exc:  # a damaged or foreign file: say so in one sentence
        raise AnalysisError(f"The trainer state in {folder} cannot be read ({type(exc).__name__}); "
                            "start without --resume or restore the checkpoint.") from None


def _load_legacy(path: Path) -> dict:
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")  # plain tensors and numbers only
        assert isinstance(state, dict) and {"optimizer", "step", "generator", "torch_rng"} <= set(state)
        return state
    except Exception as exc:
        raise AnalysisError(f"{path} was not loaded: it is not a plain-tensor trainer state ({type(exc).__name__}; "
                            "pickled code is never run); start without --resume.") from None
