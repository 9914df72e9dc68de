"""fla's element-wise activation kernels (fla/modules/activations/ops.py) in torch, for the config flags that reach them
(issue 41, docs/config-flags.md): an output gate applied apart from its norm (`ACT2FN[hidden_act]`, Triton swish),
a q/k `feature_map` (swish, sigmoid), and fla's GatedMLP with `hidden_act="powlu"` (PowGLU, fused with the down
projection or not). Each backward is the autograd of its forward, so the gradient strategy runs through them too.

Math as fla's kernels: fp32 inside, the input's dtype out;
PowGLU(x, y) = g(x)·y, g(x) = x^{p/(√x + 1)}·σ(x) for x > 0 and x·σ(x) otherwise.
"""
from __future__ import annotations

import torch


def swish_fwd(x, output_contiguous: bool = False):
    xf = x.float()
    return (xf * torch.sigmoid(xf)).to(x.dtype)


def sigmoid_fwd(x, output_contiguous: bool = False):
    return torch.sigmoid(x.float()).to(x.dtype)


def powglu_fwd(x, y, power: float = 3.0, output_contiguous: bool = False):
    xf, s = x.float(), torch.sigmoid(x.float())
    positive = xf > 0
    base = torch.where(positive, xf, torch.ones_like(xf))
    gate = torch.where(positive, torch.exp(power / (base.sqrt() + 1) * base.log()) * s, xf * s)
    return (gate * y.float()).to(x.dtype)


def _vjp(fwd, *inputs, dy, **kwargs):
    """(∂⟨fwd(inputs), dy⟩/∂input for each input), by autograd through the torch forward."""
    with torch.enable_grad():
        leaves = [t.detach().float().requires_grad_(True) for t in inputs]
        out = fwd(*leaves, **kwargs)
        grads = torch.autograd.grad(out, leaves, dy.float())
    return tuple(g.to(t.dtype) for g, t in zip(grads, inputs))


def swish_bwd(x, dy, output_contiguous: bool = False):
    return _vjp(swish_fwd, x, dy=dy)[0]


def sigmoid_bwd(x, dy, output_contiguous: bool = False):
    return _vjp(sigmoid_fwd, x, dy=dy)[0]


def powglu_fwdbwd(x, y, g, power: float = 3.0, use_weight: bool = False, output_contiguous: bool = False):
    dx, dy = _vjp(powglu_fwd, x, y, dy=g, power=power)
    return (dx, dy, powglu_fwd(x, y, power)) if use_weight else (dx, dy)


# fla's function name -> its torch twin (same arguments)
TWINS = {f.__name__: f for f in (swish_fwd, swish_bwd, sigmoid_fwd, sigmoid_bwd, powglu_fwd, powglu_fwdbwd)}
