"""export: a copy of a saved prune that carries its own modeling code and model card (issue 44).

A `pruned_*` folder saved before prunes shipped their code loads only with the project; `export DIR --out NEW`
writes NEW (a new folder, atomically, like any save) with DIR's files, config.json's `auto_map` and
`pruned_layout`, the configuration/modeling files and, when DIR has none, the README.md model card. DIR is only
read. The layout is read off the model built on the meta device from the config (no weights are loaded), so a
model of any size exports in seconds; the weights are copied byte for byte.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from analysis.cli.commands.common import emit
from analysis.errors import AnalysisError

OUT_HINT = "choose a new directory for the export"


def _setup_export(p):
    p.add_argument("--out", required=True, metavar="DIR", help="new directory for the copy with its code")
    p.add_argument("--overwrite", action="store_true", help="replace DIR only if it is a model folder this tool wrote")


def _meta_model(path: Path):
    """The pruned model built from its config on the meta device: its classes and shapes, no weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from analysis.archs import adapter_for
    from analysis.archs.install import ready
    ready()
    config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    adapter_for(config).install_routing()
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def run_export(args) -> None:
    from analysis.archs.shipped_code import ships_code
    from analysis.io import writes
    from analysis.io.marker import MARKER
    from analysis.io.model_dir import ship_code, write_pruned_card
    from analysis.models.load import read_config, resolve_source
    source = resolve_source(args.model)
    config = read_config(source)
    out = writes.check_new_dir(args.out, args.overwrite, OUT_HINT)
    real_source, real_out = os.path.realpath(source), os.path.realpath(out)
    if real_out == real_source or real_out.startswith(real_source.rstrip(os.sep) + os.sep) \
            or real_source.startswith(real_out.rstrip(os.sep) + os.sep):
        raise AnalysisError(f"--out {writes.show(out)} is {writes.show(source)} or inside or around it, and export "
                            "never changes the folder it reads; choose a directory elsewhere.")
    model = _meta_model(source)
    if not ships_code(model):
        raise AnalysisError(f"{writes.show(source)} is a {config['model_type']!r} model, the family's own type, which "
                            "loads with AutoModelForCausalLM.from_pretrained without this project; nothing to export.")
    files = sorted(p for p in Path(source).iterdir() if p.is_file() and not p.is_symlink()
                   and not p.name.startswith(".") and p.name != MARKER)
    skipped = sorted(p.name for p in Path(source).iterdir() if p not in files and p.name != MARKER
                     and not p.name.startswith("."))
    card = not (Path(source) / "README.md").exists() and (Path(source) / "pruning.json").is_file()
    if card:  # the card of a folder saved before cards, from its pruning.json read as a PruneRun (any schema)
        from analysis.shrink import prune_run
        card = prune_run.read(source).metadata()

    def fill(tmp: Path) -> None:
        for file in files:
            shutil.copyfile(file, tmp / file.name)
        ship_code(model, tmp)
        if card:
            write_pruned_card(model, tmp, card)

    written = writes.write_model_dir(out, fill, overwrite=args.overwrite, kind="pruned model", exists_hint=OUT_HINT)
    shipped = sorted(p.name for p in Path(written).glob("*.py"))
    payload = {"source": str(source), "out": str(written), "model_type": config["model_type"],
               "shipped": shipped, "card": bool(card), "skipped": skipped}
    note = "" if card else " (README.md kept as it was)" if (Path(source) / "README.md").exists() else ""
    lines = [f"exported {writes.show(source)} to {writes.show(written)} with {', '.join(shipped)} and auto_map{note}; "
             "it loads with AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True, use_safetensors=True) "
             "without this project"]
    if skipped:
        lines.append(f"not copied (not plain files): {', '.join(skipped)}")
    emit(args, payload, "\n".join(lines))


COMMANDS = {"export": ("copy a saved prune with its own modeling code and model card, so it loads without this "
                       "project (trust_remote_code=True)", _setup_export, run_export)}
