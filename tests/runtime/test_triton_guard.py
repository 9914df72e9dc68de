"""The safety net (issue 41 item 2): an fla op the routing does not cover ends in one sentence naming the module
and the fla function, never inside Triton ("0 active drivers")."""
import pytest
import torch

from analysis.archs.install import ready
from analysis.errors import AnalysisError
from analysis.runtime import triton_guard


class Unrouted(torch.nn.Module):
    """A module the routing does not know, calling an fla op that nothing routes (a chunk-local cumsum)."""

    def forward(self, g):
        from fla.ops.utils.cumsum import chunk_local_cumsum
        return chunk_local_cumsum(g, chunk_size=16)


@pytest.fixture(scope="module", autouse=True)
def routed():
    ready()


def test_unrouted_op_is_one_sentence_naming_module_and_function():
    with pytest.raises(AnalysisError) as caught:
        Unrouted()(torch.randn(1, 32, 2))
    message = str(caught.value)
    assert isinstance(caught.value, triton_guard.UnroutedKernelError)
    assert "`chunk_local_cumsum" in message and "fla.ops.utils.cumsum" in message
    assert "called by Unrouted (" in message
    assert "GPU" in message and "active drivers" not in message
    assert message.count(". ") == 0 and message.endswith(".") and "\n" not in message


def test_driver_lookup_outside_a_launch_is_the_same_sentence():
    """A path to Triton's driver that is no `kernel[grid](...)` launch (a direct device query) is caught too."""
    import importlib
    driver_module = importlib.import_module("triton.runtime.driver")
    config = driver_module.DriverConfig()          # a fresh one: the process's may already hold a driver
    if triton_guard._active_backends():
        pytest.skip("a Triton driver is active here: its lookup succeeds")
    with pytest.raises(triton_guard.UnroutedKernelError) as caught:
        config.active
    assert "active drivers" not in str(caught.value)


def test_interpreted_kernels_pass():
    """Triton's interpreter (the project's oracle) runs kernels on CPU tensors: never refused."""
    from triton.runtime.interpreter import InterpretedFunction

    class Tuned:   # an autotuner's shape: the kernel under `.fn`
        fn = InterpretedFunction.__new__(InterpretedFunction)
    assert not triton_guard.cannot_run(Tuned(), (torch.zeros(1),), {})
