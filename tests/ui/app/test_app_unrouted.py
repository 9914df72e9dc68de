"""Issue 41 item 2 in the dashboard: an fla op the routing does not cover (the CLI test's trigger: a GLA checkpoint
saved by fla with `fuse_norm` off, whose output gate calls fla's `swish_fwd`, with the project's route taken out of
fla's dispatch registry, as a new fla op would look) is a page notice — st.error with the safety net's one sentence,
never a traceback or "0 active drivers" — and the app keeps working: the sidebar stays, and once the route is back
the same page draws."""
import inspect

import pytest
import torch

from helpers.app import assert_clean, charts, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


@pytest.fixture(scope="module")
def gla_unfused(tmp_path_factory):
    from fla.models import GLAConfig, GLAForCausalLM

    from analysis.data import corpus as data
    config = GLAConfig(hidden_size=32, num_hidden_layers=1, num_heads=2, vocab_size=len(data.load_tokenizer()),
                       intermediate_size=64, fuse_norm=False, fuse_swiglu=False, fuse_cross_entropy=False)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gla") / "gla-unfused"
    GLAForCausalLM(config).save_pretrained(path, safe_serialization=True)
    return path


def test_unrouted_op_is_a_page_notice_and_the_app_keeps_working(gla_unfused, monkeypatch):
    import fla.backends

    from analysis.archs.install import ready
    from analysis.runtime import fla_dispatch
    ready()
    swish_fwd = inspect.unwrap(fla.modules.activations.ops.swish_fwd)
    backends = fla.backends._function_registries[swish_fwd]._backends
    at = start(monkeypatch, gla_unfused)           # the Model page: loads and describes, no forward yet
    assert_clean(at)
    route = backends.pop(fla_dispatch.BACKEND_TYPE)   # the route a new fla would not have
    try:
        at.switch_page("pages/states.py").run()
    finally:
        backends[fla_dispatch.BACKEND_TYPE] = route
    assert not at.exception, [e.value for e in at.exception]
    [notice] = [e.value for e in at.error]
    assert notice.startswith("fla's `swish_fwd` (fla.modules.activations.ops), called by GatedLinearAttention"), notice
    assert "GPU" in notice and "`fuse_norm` to true" in notice
    assert "active drivers" not in notice and "Traceback" not in notice and "\n" not in notice
    assert notice.endswith(".") and notice.count(". ") == 0, notice
    assert len(at.sidebar.selectbox) and len(at.sidebar.text_input)   # the sidebar was drawn: the app is still there
    at.run()                                                     # the route is back: the same page draws
    assert_clean(at)
    assert charts(at), "the States page drew no chart once the op was routed again"
