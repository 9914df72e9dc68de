"""fla's elementwise activation kernels and the l2 norm in torch, with fla's signatures (fla/modules/activations/ops.py,
fla/modules/norm/l2norm.py): each computes in fp32 and returns the input's dtype, as the Triton kernels do, and
each backward is the kernel's own formula. They are registered through fla's backend dispatch for CPU tensors
(analysis.runtime.fla_dispatch), so fla's autograd Functions (SwishFunction, L2NormFunction, ...) run unchanged.
`output_contiguous` only picks a memory layout in fla; torch's elementwise results are contiguous here anyway.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _out(z: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return z.to(like.dtype).contiguous()


def swish_fwd(x, output_contiguous=False):
    return _out(F.silu(x.float()), x)


def swish_bwd(x, dy, output_contiguous=False):
    xf = x.float()
    s = torch.sigmoid(xf)
    return _out(dy.float() * s * (1.0 + xf * (1.0 - s)), x)


def sigmoid_fwd(x, output_contiguous=False):
    return _out(torch.sigmoid(x.float()), x)


def sigmoid_bwd(x, dy, output_contiguous=False):
    s = torch.sigmoid(x.float())
    return _out(dy.float() * s * (1.0 - s), x)


def logsigmoid_fwd(x, temperature=1.0, output_contiguous=False):
    return _out(F.logsigmoid(x.float()) / temperature, x)


def logsigmoid_bwd(x, dy, temperature=1.0, output_contiguous=False):
    return _out(dy.float() * (1.0 - torch.sigmoid(x.float())) / temperature, x)


def elu_p1_fwd(x):
    xf = x.float()
    return _out(torch.where(xf >= 0, xf + 1.0, torch.exp(xf.clamp(max=0.0))), x)


def elu_p1_bwd(x, dy):
    return _out(dy.float() * torch.exp(x.float().clamp(max=0.0)), x)


def swiglu_fwd(x, y, output_contiguous=False):
    return _out(F.silu(x.float()) * y.float(), x)


def swiglu_fwdbwd(x, y, g, use_weight=False, output_contiguous=False):
    """(dx, dy[, z]) of z = swish(x)·y for the upstream gradient g; z itself when use_weight (SwiGLULinear's)."""
    xf, yf, gf = x.float(), y.float(), g.float()
    s = torch.sigmoid(xf)
    swish = xf * s
    dx = gf * yf * s * (1.0 + xf * (1.0 - s))
    dy = gf * swish
    out = (_out(dx, x), _out(dy, y))
    return (*out, _out(swish * yf, x)) if use_weight else out


def swiglu_linear(x, y, weight, bias):
    """fla's `swiglu_linear` entry point: (swish(x)·y) W + b, differentiable by torch's autograd."""
    return F.linear(swiglu_fwd(x, y), weight, bias)


def l2norm_fwd(x, eps=1e-6, output_dtype=None):
    """(y, rstd): y = x·rstd, rstd = 1/sqrt(Σx² + eps) over the last dim, fp32 inside; rstd fp32, as fla's."""
    xf = x.float()
    rstd = torch.rsqrt(xf.square().sum(-1) + eps)
    return (xf * rstd[..., None]).to(output_dtype or x.dtype).contiguous(), rstd


def l2norm_bwd(y, rstd, dy, eps=1e-6):
    yf, dyf, r = y.float(), dy.float(), rstd.float()[..., None]
    return _out(dyf * r - (dyf * yf).sum(-1, keepdim=True) * yf * r, y)


def _powglu_gate(x, power):
    """fla's PowGLU gate (fp32): x^(power/(√x+1))·σ(x) for x > 0, swish(x) elsewhere."""
    positive = x > 0
    xp = torch.where(positive, x, torch.ones_like(x))   # only positive lanes reach log/sqrt, as in fla's kernel
    exponent = power / (torch.sqrt(xp) + 1.0)
    s = torch.sigmoid(x)
    return torch.where(positive, torch.exp(exponent * torch.log(xp)) * s, x * s)


def powglu_fwd(x, y, power=3.0, output_contiguous=False):
    return _out(_powglu_gate(x.float(), power) * y.float(), x)


def powglu_fwdbwd(x, y, g, power=3.0, use_weight=False, output_contiguous=False):
    """(dx, dy[, z]) by torch's autograd through the gate (not a transcription of fla's hand-derived formula)."""
    with torch.enable_grad():
        xf = x.detach().float().requires_grad_()
        gate = _powglu_gate(xf, power)
        (dgate,) = torch.autograd.grad(gate, xf, g.float() * y.float())
    gate = gate.detach()
    out = (_out(dgate, x), _out(g.float() * gate, y))
    return (*out, _out(gate * y.float(), x)) if use_weight else out


def powglu_linear(x, y, weight, bias, power=3.0):
    """fla's `powglu_linear` entry point: (gate(x)·y) W + b, differentiable by torch's autograd."""
    return F.linear(_out(_powglu_gate(x.float(), power) * y.float(), x), weight, bias)
