"""The bundled sample models (sample_models/*): listed from their config.json and README alone.

Kept free of torch and transformers, so `python -m analysis models` answers in a moment.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO_ROOT / "sample_models"


@dataclass
class SampleInfo:
    name: str
    path: str
    model_type: str
    description: str


def scan_samples(root: Path | None = None) -> tuple[list[SampleInfo], list[tuple[str, str]]]:
    """(bundled checkpoints, [(folder, why it was skipped)]): folders of `root` (SAMPLES_DIR) with a config.json.

    Hidden folders (leftover temporary copies) are ignored; a folder whose config.json or README.md cannot
    be read is skipped and reported instead of breaking every listing.
    """
    root = SAMPLES_DIR if root is None else root
    samples, skipped = [], []
    try:
        configs = sorted(root.glob("*/config.json"))
    except OSError:
        return [], [(str(root), "cannot be listed")]
    for cfg in configs:
        name = cfg.parent.name
        if name.startswith("."):
            continue
        try:
            config = json.loads(cfg.read_text(encoding="utf-8"))
            if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
                raise ValueError("config.json is not an object with a model_type")
            card = cfg.parent / "README.md"
            description = config.get("analysis_description") or (
                _first_paragraph(card.read_text(encoding="utf-8")) if card.is_file() else "")
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:80]
            skipped.append((name, reason))
            continue
        samples.append(SampleInfo(name, str(cfg.parent), config["model_type"], str(description)))
    return samples, skipped


def _first_paragraph(markdown: str) -> str:
    for block in markdown.split("\n\n"):
        block = block.strip()
        if block and not block.startswith(("#", "---", "|", "!")):
            return " ".join(block.split())
    return ""
