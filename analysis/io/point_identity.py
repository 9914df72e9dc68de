"""What a cached point depends on: the model (every weight byte + config) and the code that computed it.

Both go into every point-cache key (`analysis.io.point_cache`), so other weights, another readout scale
or a fix to pruning/evaluation code never serve an old number as "[cached]".
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

import torch

PACKAGE_DIR = Path(__file__).resolve().parents[1]   # analysis/
ROOTS = ("analysis.runs.sweep", "analysis.shrink.sensitivity")   # the modules that compute cached points


def model_identity(model) -> str:
    """Hash of the weights themselves (not the path): every byte of every tensor, its name, dtype and shape,
    plus the config (which holds settings such as the readout scale), so any change gets a new key."""
    h = hashlib.blake2b(digest_size=16)
    config = {k: v for k, v in model.config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    items = model.named_tensors() if hasattr(model, "named_tensors") else sorted(model.state_dict().items())
    for name, tensor in items:  # a streamed model reads its weights one unit at a time, in the same order
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def code_hash(roots: tuple[str, ...] = ROOTS) -> str:
    """sha256 of the sources of every `analysis` module the roots import (statically, transitively).

    A subpackage reached by any import counts whole: families and strategies are looked up by name at run
    time (importlib), which no import statement shows. Over-counting only costs a recompute; missing a
    module would serve stale numbers, so when in doubt a file is included."""
    h = hashlib.sha256()
    for path in _closure(roots):
        h.update(f"{path.relative_to(PACKAGE_DIR).as_posix()}\0".encode())
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != "analysis":
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(path: Path, name: str) -> set[str]:
    """Module names an `analysis` source file imports, anywhere in it (function-local imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return {n for n in found if n.split(".")[0] == "analysis"}


def _closure(roots: tuple[str, ...]) -> list[Path]:
    todo, seen = list(roots), {}
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None or path in seen.values():
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b.c runs a/ and a/b/ first
        todo += sorted(_imports(path, name))
        if path.name == "__init__.py" and path.parent != PACKAGE_DIR:  # a subpackage: all of it
            todo += [f"{name}.{p.stem}" for p in sorted(path.parent.glob("*.py")) if p.name != "__init__.py"]
            todo += [f"{name}.{p.parent.name}" for p in sorted(path.parent.glob("*/__init__.py"))]
    return sorted(seen.values())
