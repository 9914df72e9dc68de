"""Issue 41 items 2 and 3 through the CLI, on the known trigger: a GLA checkpoint saved by fla with `fuse_norm` off
(its output gate then calls fla's Triton `swish`). It runs (swish goes through fla's dispatch registry to the
project's CPU op); with that route taken away — what a new fla op the routing does not know looks like — `rank` ends
in one sentence naming the module, the fla function and the flag to change, exit 2, never inside Triton."""
import inspect

import pytest
import torch

from analysis.cli.main import main
from analysis.runtime import fla_dispatch

ARGS = ["--tokens", "32", "--batch", "1", "--quiet"]


@pytest.fixture(scope="module")
def gla_unfused(tmp_path_factory):
    from fla.models import GLAConfig, GLAForCausalLM
    config = GLAConfig(hidden_size=32, num_hidden_layers=1, num_heads=2, vocab_size=8192, intermediate_size=64,
                       fuse_norm=False, fuse_swiglu=False, fuse_cross_entropy=False)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gla") / "gla-unfused"
    GLAForCausalLM(config).save_pretrained(path, safe_serialization=True)
    return path


def test_known_trigger_runs(gla_unfused, capsys):
    assert main(["rank", str(gla_unfused), *ARGS]) == 0, capsys.readouterr().err


def test_unrouted_op_is_one_sentence_and_exit_2(gla_unfused, monkeypatch, capsys):
    import fla.backends
    from analysis.archs.install import ready
    ready()
    swish_fwd = inspect.unwrap(fla.modules.activations.ops.swish_fwd)
    registry = fla.backends._function_registries[swish_fwd]
    monkeypatch.delitem(registry._backends, fla_dispatch.BACKEND_TYPE)   # the route a new fla would not have
    capsys.readouterr()
    assert main(["rank", str(gla_unfused), *ARGS]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: fla's `swish_fwd` (fla.modules.activations.ops), called by GatedLinearAttention")
    assert "GPU" in err and "`fuse_norm` to true" in err
    assert "Traceback" not in err and "active drivers" not in err and len(err.splitlines()) == 1
