"""A model saved as one directory: weights (safetensors), tokenizer, JSON side files, written atomically.

Every model directory the project writes (a prune, a trained model, a training checkpoint, the dashboard's
Save) goes through `save_model_dir`, so each gets the same guarantees from `writes.write_model_dir`.
"""
from __future__ import annotations

import json
from pathlib import Path

from analysis.io.writes import write_model_dir


def ship_code(model, folder: Path) -> None:
    """A registered pruned type gets its own configuration/modeling files and config.json's `auto_map` and
    `pruned_layout` (analysis.archs.shipped_code), so it loads with trust_remote_code=True without this project."""
    from analysis.archs.shipped_code import ships_code, shipped   # torch: only when a model is saved
    model = built(model)
    if not ships_code(model):
        return
    from analysis.archs import adapter_for
    code = shipped(model, adapter_for(model).shipped_parts(model))
    for name, text in code.files.items():
        (folder / name).write_text(text)
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config.update(code.config)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def built(model):
    """The transformers model object itself: a model read one block at a time keeps it (on the meta device) as
    its skeleton's, whose classes and shapes are what the shipped code and the card describe."""
    skeleton = getattr(model, "skeleton", None)
    return getattr(skeleton, "model", model)


def needs_fla(model) -> bool:
    """Whether the model's classes come from fla (then loading it anywhere needs fla too)."""
    return any(cls.__module__.split(".")[0] == "fla" for cls in type(built(model)).__mro__)


def write_pruned_card(model, folder: Path, metadata: dict) -> None:
    """README.md: the prune's model card, from the config.json just written and the pruning metadata."""
    from analysis.io import pruned_card
    config = json.loads((folder / "config.json").read_text())
    (folder / "README.md").write_text(pruned_card.render(config, metadata, needs_fla(model)))


def save_model_dir(model, out, *, tokenizer=None, json_files: dict | None = None, extra=None,
                   overwrite: bool = False, kind: str = "model",
                   exists_hint: str = "choose a new directory or allow overwriting") -> Path:
    """save_pretrained (safetensors only) into a temporary sibling, add the tokenizer, `json_files`
    ({name: JSON-able}) and whatever `extra(tmp)` writes, then swap it in (see `writes.write_model_dir`)."""
    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        ship_code(model, tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        for name, payload in (json_files or {}).items():
            (tmp / name).write_text(json.dumps(payload, indent=2))
        if extra is not None:
            extra(tmp)
    return write_model_dir(out, fill, overwrite=overwrite, kind=kind, exists_hint=exists_hint)


def save_model(model, out: str | Path, tokenizer=None, metadata: dict | None = None, overwrite: bool = False,
               extra=None, exists_hint: str = "choose a new directory or allow overwriting") -> Path:
    """save_pretrained (safetensors) into a temporary sibling, then rename: never a half-written model.

    `overwrite` replaces only a model directory this project wrote (see analysis.io.writes); `extra(tmp)`
    may add files before the directory is sealed."""
    def fill(tmp: Path) -> None:
        if metadata is not None:   # a prune: its model card beside pruning.json (analysis.io.pruned_card)
            write_pruned_card(model, tmp, metadata)
        if extra is not None:
            extra(tmp)
    return save_model_dir(model, out, tokenizer=tokenizer,
                          json_files=None if metadata is None else {"pruning.json": metadata}, extra=fill,
                          overwrite=overwrite, kind="pruned model", exists_hint=exists_hint)
