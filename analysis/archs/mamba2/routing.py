"""Device routing for transformers' Mamba-2 mixers (mamba2, nemotron_h, granitemoehybrid, falcon_h1, bamba, zamba2).

Every mixer's prefill calls one module global, `mamba2_chunk_scan(x, dt, A, B, C, chunk_size, D, dt_bias, ...)`,
which transformers binds to mamba_ssm's `mamba_chunk_scan_combined` when mamba_ssm is importable and to its own
pure-torch chunked SSD otherwise (`__wrapped__`). We replace that global: CPU tensors take the project's chunked
linear attention (`analysis.runtime.cpu_ops.linear_attention`, through `backend.observed`, so the state sink is fed by the
forward's own pass); CUDA tensors keep the bound kernel, the observer's states coming from a torch replay.

The recurrence inputs, per head h of group h // (heads/groups), dt = clamp(softplus(dt + dt_bias), dt_limit):
    q = C, k = B (both [B,T,groups,N], repeated to the heads), v = dt·x [.., head_dim], g = A·dt, scale 1,
so S_t = e^{A dt_t} S_{t−1} + dt_t B_t x_tᵀ (K-first [N, head_dim]; transformers keeps [head_dim, N]) and
y_t = S_tᵀ C_t + D·x_t. The single-token decode (`mamba2_selective_state_update`) and the training-only fused
path (`mamba2_split_conv1d_scan_combined`, mamba_ssm only) are left alone: torch on CPU, unobserved.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from analysis.archs.hf_routing import route_modules
from analysis.archs.kernels import kernel_spec
from analysis.runtime import backend
from analysis.runtime.recurrences import RecurrenceInputs

MODELING_MODULES = tuple(f"transformers.models.{m}.modeling_{m}" for m in
                         ("mamba2", "nemotron_h", "granitemoehybrid", "falcon_h1", "bamba", "zamba2"))
ENTRY_POINT = "mamba2_chunk_scan"
KERNEL = "ssd"   # the adapter's kernel: its spec names the recurrence the scan is (decaying linear attention)


def recurrence_inputs(x, dt, A, B, C, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                      initial_states=None) -> RecurrenceInputs:
    """The SSD scan's arguments as the project's linear-attention inputs, fp32 (see the module doc)."""
    heads, groups = x.shape[2], B.shape[2]
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if dt_softplus:
        dt = F.softplus(dt)
    dt = dt.clamp(min=dt_limit[0], max=dt_limit[1])
    q, k = (z.float().repeat_interleave(heads // groups, dim=2) for z in (C, B))
    h0 = None if initial_states is None else initial_states.float().transpose(-1, -2)
    return RecurrenceInputs(
        q=q, k=k, v=x.float() * dt[..., None], beta=torch.ones_like(dt), g=A.float() * dt, scale=1.0,
        initial_state=h0, cu_seqlens=None, recurrence=kernel_spec(KERNEL).recurrence, q_raw=C, k_raw=B)


def routed(bound):
    """`mamba2_chunk_scan` by device; `bound` is what transformers bound (mamba_ssm's kernel or its torch SSD)."""
    def scan(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None, dt_softplus=False,
             dt_limit=(0.0, float("inf")), return_final_states=False, **kwargs):
        r = recurrence_inputs(hidden_states, dt, A, B, C, dt_bias, dt_softplus, dt_limit, initial_states)
        if hidden_states.is_cuda:
            backend.observed(r, compute=False)
            return bound(hidden_states, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias, initial_states=initial_states,
                         dt_softplus=dt_softplus, dt_limit=dt_limit, return_final_states=return_final_states,
                         **kwargs)
        if kwargs.get("seq_idx") is not None or kwargs.get("cu_seqlens") is not None:
            raise ValueError("packed sequences (seq_idx / cu_seqlens) need mamba_ssm on a GPU; the CPU scan keeps "
                             "one sequence per row")   # as transformers' own torch fallback refuses them
        o, S = backend.observed(r, compute=True)
        o = o.contiguous()
        if D is not None:
            o = o + D.float()[:, None] * hidden_states.float()
        if return_final_states:
            return o, S.transpose(-1, -2).contiguous()
        return o
    scan.__wrapped__ = bound
    scan.__name__ = ENTRY_POINT
    return scan


def install() -> None:
    """Route every importable Mamba-2 modeling module once per process (idempotent)."""
    route_modules(MODELING_MODULES, (ENTRY_POINT,), routed)
