"""Shared fixtures: tiny random-init fla models saved as real HF directories (safetensors), and the dashboard
tests' fixtures. Modules opt in to the non-autouse ones with `pytestmark = pytest.mark.usefixtures(...)`."""
from __future__ import annotations

import threading

import pytest
import torch

import analysis
from family_cases.text_lm import build_tiny
from ui_fixtures import save_tiny_lm, save_tiny_recall

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
def recall_dir(tmp_path_factory):
    """A saved tiny DeltaNet recall model (one per test module)."""
    return save_tiny_recall(tmp_path_factory.mktemp("tiny-recall"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run thousands of tiny ops; with 2 intra-op threads on a busy 2-core box each op waits for
    the other core (50× slower here), so these tests run single-threaded and restore the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def navigation_only(monkeypatch, request):
    """Treat pages/ as st.navigation pages, as `streamlit run` does after the first st.navigation call.

    AppTest re-detects the legacy pages/ directory before every run, so from the second run on it runs the
    current page file directly (legacy multipage mode, what a deep link does on a fresh server), and the
    page has to re-enter app.py itself (ui.frame). One test keeps that mode; the others see the steady state.
    """
    if request.node.name == "test_legacy_pages_mode_still_renders_inside_the_frame":
        return
    from streamlit.runtime.pages_manager import PagesManager
    original = PagesManager.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False
    monkeypatch.setattr(PagesManager, "__init__", init)


@pytest.fixture
def sweep_cache(tmp_path, monkeypatch):
    """Each test gets its own on-disk point cache (the pages and the core read analysis.io.point_cache.CACHE_DIR)."""
    from analysis.io import point_cache
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "sweeps")


@pytest.fixture
def caches_only_in_script_runs(monkeypatch):
    """Any st.cache_data / st.cache_resource call (ui.memo's stores included) from a thread without a script
    run context fails, and is recorded (a job catches the error, so the test checks the record too)."""
    outside = []
    from streamlit.runtime.caching.cache_utils import CachedFunc
    from streamlit.runtime.scriptrunner import get_script_run_ctx
    real = CachedFunc.__call__

    def checked(self, *args, **kwargs):
        if get_script_run_ctx(suppress_warning=True) is None:
            outside.append(f"{self._info.func.__qualname__} from thread {threading.current_thread().name}")
            raise RuntimeError(f"Streamlit cache {self._info.func.__qualname__} called outside a script run")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(CachedFunc, "__call__", checked)
    yield outside
    assert outside == []
