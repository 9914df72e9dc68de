"""The dashboard tests' own fixtures (AppTest): pages/ as st.navigation pages, Streamlit caches only in script
runs, a saved tiny recall model. Modules opt in with `pytestmark = pytest.mark.usefixtures(...)`."""
from __future__ import annotations

import threading

import pytest

from ui_fixtures import save_tiny_recall


@pytest.fixture(scope="module")
def recall_dir(tmp_path_factory):
    """A saved tiny DeltaNet recall model (one per test module)."""
    return save_tiny_recall(tmp_path_factory.mktemp("tiny-recall"))


@pytest.fixture(scope="module")
def nemotron_dir(tmp_path_factory):
    """A transformers-saved tiny Nemotron-H ("M*M-": Mamba-2, attention, Mamba-2, MLP) that reads real text."""
    from analysis.data import corpus as data
    from family_cases.mamba2 import make_model
    path = tmp_path_factory.mktemp("nemotron-h")
    model = make_model("nemotron_h")
    model.resize_token_embeddings(len(data.load_tokenizer()), mean_resizing=False)
    model.save_pretrained(path)
    return path


@pytest.fixture
def navigation_only(monkeypatch, request):
    """Treat pages/ as st.navigation pages, as `streamlit run` does after the first st.navigation call.

    AppTest re-detects the legacy pages/ directory before every run, so from the second run on it runs the
    current page file directly (legacy multipage mode, what a deep link does on a fresh server), and the
    page has to re-enter app.py itself (ui.shared.frame). One test keeps that mode; the others see the steady state.
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
def caches_only_in_script_runs(monkeypatch):
    """Any st.cache_data / st.cache_resource call (ui.shared.memo's stores included) from a thread without a script
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
