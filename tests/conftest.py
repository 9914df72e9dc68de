"""Fixtures shared by several test folders: tiny random-init fla models saved as real HF directories
(safetensors), a private point cache, one torch thread; a folder's own fixtures live in its conftest.py.
Modules opt in to the non-autouse ones with `pytestmark = pytest.mark.usefixtures(...)`."""
from __future__ import annotations

import pytest
import torch

import analysis
from family_cases.text_lm import build_tiny
from ui_fixtures import save_tiny_lm

analysis.ready()  # every test may build or load fla models (CPU path + the project's model types)


@pytest.fixture(scope="session", params=["delta_net", "gated_deltanet"])
def tiny_model_dir(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    build_tiny(request.param).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    dirs = {}
    for kind in ("delta_net", "gated_deltanet"):
        dirs[kind] = tmp_path_factory.mktemp(f"tiny-{kind}")
        build_tiny(kind).save_pretrained(dirs[kind])
    return dirs


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    """A saved tiny DeltaNet language model (one per test module)."""
    return save_tiny_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run thousands of tiny ops; with 2 intra-op threads on a busy 2-core box each op waits for
    the other core (50× slower here), so these tests run single-threaded and restore the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def sweep_cache(tmp_path, monkeypatch):
    """Each test gets its own on-disk point cache (the pages and the core read analysis.io.point_cache.CACHE_DIR)."""
    from analysis.io import point_cache
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "sweeps")
