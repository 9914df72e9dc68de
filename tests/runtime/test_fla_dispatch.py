"""fla's backend registry as the CPU seam (issue 41 item 3): the project's ops registered through `fla.backends`
run fla's own autograd Functions on CPU, and equal torch's autograd on independent formulas (values and grads)."""
import importlib

import pytest
import torch
import torch.nn.functional as F

from analysis.archs.install import ready
from analysis.runtime import fla_dispatch


@pytest.fixture(scope="module", autouse=True)
def routed():
    ready()


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1e-12)).item()


def _x(*shape, seed=0):
    return (3 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))).requires_grad_()


def _activations():
    return importlib.import_module("fla.modules.activations.ops")


CASES = {   # name -> (fla's public op on CPU, torch reference, number of inputs)
    "swish": (lambda m: m.swish, F.silu, 1),
    "sigmoid": (lambda m: m.sigmoid, torch.sigmoid, 1),
    "logsigmoid": (lambda m: (lambda x: m.logsigmoid(x, 0.5)), lambda x: F.logsigmoid(x) / 0.5, 1),
    "elu_p1": (lambda m: m.elu_p1, lambda x: F.elu(x) + 1, 1),
    "swiglu": (lambda m: m.swiglu, lambda x, y: F.silu(x) * y, 2),
    "powglu": (lambda m: (lambda x, y: m.powglu(x, y, 2.5)),
               lambda x, y: torch.where(x > 0, x.clamp(min=1e-30).pow(2.5 / (x.clamp(min=0).sqrt() + 1)),
                                        x) * torch.sigmoid(x) * y, 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fla_function_on_cpu_equals_torch(name):
    op, reference, arity = CASES[name]
    inputs = [_x(3, 5, 40, seed=s) for s in range(arity)]
    twins = [x.detach().clone().requires_grad_() for x in inputs]
    out = op(_activations())(*inputs)
    ref = reference(*twins)
    upstream = torch.randn_like(ref)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    assert rel(out, ref) < 1e-5
    for x, t in zip(inputs, twins):
        assert rel(x.grad, t.grad) < 1e-5


@pytest.mark.parametrize("fused", ["swiglu_linear", "powglu_linear"])
def test_fused_linear_entry_points(fused):
    m = _activations()
    x, y = _x(4, 24, seed=1), _x(4, 24, seed=2)
    w, b = _x(8, 24, seed=3), _x(8, seed=4)
    gate = CASES[fused.split("_")[0]][1]
    twins = [t.detach().clone().requires_grad_() for t in (x, y, w, b)]
    out = getattr(m, fused)(x, y, w, b, *((2.5,) if fused == "powglu_linear" else ()))
    ref = F.linear(gate(*twins[:2]), *twins[2:])
    assert rel(out, ref) < 1e-5
    out.square().sum().backward()
    ref.square().sum().backward()
    for t, r in zip((x, y, w, b), twins):
        assert rel(t.grad, r.grad) < 1e-4


def test_bf16_in_bf16_out():
    h = _activations().swish(torch.randn(2, 16).bfloat16())
    assert h.dtype == torch.bfloat16   # fp32 inside, the input's dtype out, as fla's kernel


def test_l2_norm_values_and_grads():
    from fla.modules.l2norm import l2_norm
    x = _x(2, 7, 3, 32)
    twin = x.detach().clone().requires_grad_()
    out = l2_norm(x)
    ref = twin / torch.sqrt(twin.square().sum(-1, keepdim=True) + 1e-6)
    upstream = torch.randn_like(ref)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    assert rel(out, ref) < 1e-5 and rel(x.grad, twin.grad) < 1e-5


def test_verifier_keeps_other_devices_on_fla():
    """A call with any tensor off the CPU (meta stands in for CUDA here) is refused: fla keeps its own choice."""
    assert fla_dispatch.on_cpu(torch.zeros(2)) == (True, None)
    assert fla_dispatch.on_cpu(torch.zeros(2), torch.empty(2, device="meta"))[0] is False
    assert fla_dispatch.on_cpu(3.0)[0] is False


def test_registered_through_the_registry_not_patched():
    """The dispatched ops keep fla's own function objects (no module attribute replaced) and name the registry."""
    import fla.ops.gated_delta_rule as gdn_ops
    import fla.ops.kda as kda_ops
    m = _activations()
    for fn in (m.swish_fwd, m.swiglu_fwd, gdn_ops.chunk_gated_delta_rule, kda_ops.chunk_kda):
        assert not getattr(fn, "_analysis_routed", False)
        assert fla_dispatch.routes_to_project(fn), fn.__name__
