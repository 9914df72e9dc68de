"""One object per kind of recurrence: the one place that knows what a kind of state update is and does.

fla keeps one folder per op (fla/ops/<op>/{chunk, fused_recurrent, naive}.py); here one `Recurrence` per kind holds
    its chunked CPU op and its token-by-token reference loop    (analysis.runtime.cpu_ops: `chunked`, `loop`)
    the kernel-side preprocessing of its op's arguments          (`prepare`: l2 norm, β's sigmoid, KDA's gate)
    one token of one head                                        (`step`: the State lab's "model" rule)
    its update rule for the pages                                (`update` LaTeX, `decay_words`, `writes`)
    the random inputs `latency` times its CPU and CUDA ops on   (`latency_inputs`, `run`)
    what the every-token spectral tracker needs                  (`tracker_inputs`; None where it cannot follow)
    which of a head's per-token inputs follow a kept channel     (`kept`, `rotated`: the State lab's pruned head)
An adapter names its kernel, the kernel spec (analysis.archs.kernels) names its recurrence, the prepared inputs
(`RecurrenceInputs`) carry it; nothing else branches on the kind. Kinds (K-first S ∈ R^{dk×dv}, o_t = scale·S_tᵀq_t):

    delta_rule              S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ                  DeltaNet
    gated_delta_rule        S_t = (I − β_t k_t k_tᵀ) e^{g_t} S_{t−1} + β_t k_t v_tᵀ          Gated DeltaNet, Qwen3.5
    per_channel_delta_rule  S_t = (I − β_t k_t k_tᵀ) Diag(e^{g_t}) S_{t−1} + β_t k_t v_tᵀ    KDA, Kimi Linear
    linear_attention        S_t = e^{g_t} S_{t−1} + k_t v_tᵀ                                 Mamba-2's SSD
    gated_linear_attention  S_t = Diag(e^{g_t}) S_{t−1} + k_t v_tᵀ                           GLA
    dplr_delta_rule         S_t = (Diag(e^{g_t}) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ              RWKV-7

A new kind: its op file in cpu_ops/, a subclass here registered in RECURRENCES, its kernel spec naming it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from analysis.errors import AnalysisError
from analysis.runtime.cpu_ops.delta_rule import chunked_delta_rule, recurrent_delta_rule
from analysis.runtime.cpu_ops.dplr_delta_rule import chunked_dplr_delta_rule, recurrent_dplr_delta_rule
from analysis.runtime.cpu_ops.gated_linear_attention import (chunked_gated_linear_attention,
                                                             recurrent_gated_linear_attention)
from analysis.runtime.cpu_ops.linear_attention import chunked_linear_attention, recurrent_linear_attention

L2_EPS = 1e-6  # fla's in-kernel l2norm: x / sqrt(Σx² + 1e-6)


def l2_norm(x: torch.Tensor) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + L2_EPS)


@dataclass
class RecurrenceInputs:
    """What enters the recurrence, prepared as the kernel prepares it; state layout K-first."""
    q: torch.Tensor                    # [B,T,H,dk], l2-normalised if the layer asks for it
    k: torch.Tensor                    # [B,T,H,dk]
    v: torch.Tensor                    # [B,T,H,dv]
    beta: torch.Tensor                 # [B,T,H], after sigmoid (and ×2 with negative eigenvalues); 1 where unused
    g: torch.Tensor | None             # log-decay: [B,T,H] per head, [B,T,H,dk] per key channel, None
    scale: float
    initial_state: torch.Tensor | None  # [N,H,dk,dv]
    cu_seqlens: torch.Tensor | None
    recurrence: Recurrence              # the kind of update these inputs run (below)
    q_raw: torch.Tensor | None = None   # [B,T,H_qk,dk] what the layer passed in: post-conv, pre-l2norm
    k_raw: torch.Tensor | None = None
    a: torch.Tensor | None = None       # [B,T,H,dk] with b: the low-rank part of a diagonal-plus-low-rank
    b: torch.Tensor | None = None       # transition (dplr_delta_rule), else None


DECAY_LATEX = {"none": "", "head": r"e^{g_t}\, ", "channel": r"\mathrm{Diag}(e^{g_t})\, "}
DECAY_WORDS = {"none": "no decay", "head": "one decay per head", "channel": "one decay per key channel"}
DECAY_SHAPES = {"none": lambda B, T, H, dk: None, "head": lambda B, T, H, dk: (B, T, H),
                "channel": lambda B, T, H, dk: (B, T, H, dk)}


class Recurrence:
    """One kind of recurrence (module doc). Subclasses set the class attributes and the ops."""
    name = ""                       # what a kernel spec names
    decay = "none"                  # the log-decay g: absent, one per (token, head), one per (token, head, key channel)
    takes = ("q", "k", "v")         # the tensors its ops take, in order, before scale and the initial state
    writes = ""                     # what a write does beyond "each token writes its value v at its key k"
    correction = 0.0                # the spectral tracker's u = β(v − correction·g·Sᵀk): 1 delta rule, 0 linear attention
    chunked_op = staticmethod(chunked_linear_attention)     # the project's chunked CPU op (cpu_ops)
    loop_op = staticmethod(recurrent_linear_attention)      # its token-by-token reference

    def __repr__(self) -> str:
        return f"<recurrence {self.name}>"

    def __reduce__(self):  # one object per kind, also through a pickle (Streamlit's caches): compared with `is`
        return recurrence_named, (self.name,)

    @property
    def update(self) -> str:
        """The state update (decay first, then the write) in LaTeX."""
        return rf"S_t = {DECAY_LATEX[self.decay]}S_{{t-1}} + k_t v_t^\top"

    @property
    def decay_words(self) -> str:
        return DECAY_WORDS[self.decay]

    # --- the ops ---------------------------------------------------------------------------------
    def chunked(self, r: RecurrenceInputs, sink=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(o [B,T,H,dv], final state [B,H,dk,dv]) by the chunked op; a StateSink gets the states it asks for."""
        return self.chunked_op(*(getattr(r, f) for f in self.takes), r.scale, r.initial_state, sink=sink)

    def loop(self, r: RecurrenceInputs, return_all_states: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The same by the token-by-token loop (the definition): o and the final state or every state [B,T,H,dk,dv]."""
        return self.loop_op(*(getattr(r, f) for f in self.takes), r.scale, r.initial_state,
                            return_all_states=return_all_states)

    def run(self, x: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The chunked op on `latency_inputs` (its default scale; what `latency` times on CPU)."""
        return self.chunked_op(*(x.get(f) for f in self.takes))

    def step(self, S, k, v, beta, g=None, a=None, b=None) -> torch.Tensor:
        """One token of one head: S [dk, dv], k [dk], v [dv], beta [], g None, [] or [dk], a, b [dk]."""
        if g is not None:
            S = S * g.exp()
        return S + torch.outer(k, v)

    def written(self, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """What a clean write of each token reads back, w_j = ‖k_j‖² v_j ([T, dk], [T, dv], [T] → [T, dv])."""
        return k.square().sum(-1)[:, None] * v

    # --- preparing, timing, tracking -------------------------------------------------------------
    def prepare(self, q, k, v, g=None, scale=None, initial_state=None, cu_seqlens=None, **_unused) -> RecurrenceInputs:
        """fla's chunk_simple_gla(q, k, v, g, scale, initial_state, …) arguments as prepared inputs, fp32."""
        return RecurrenceInputs(q=q.float(), k=k.float(), v=v.float(),
                                beta=torch.ones_like(v[..., 0], dtype=torch.float32), g=None if g is None else g.float(),
                                scale=q.shape[-1] ** -0.5 if scale is None else scale, initial_state=initial_state,
                                cu_seqlens=cu_seqlens, recurrence=self, q_raw=q, k_raw=k)

    def latency_inputs(self, B, T, H, dk, dv, device, dtype, gen) -> dict:
        """Random inputs of the shapes its kernel takes: unit q, k; v; β (delta rules); a log-decay g in (−0.1, 0)
        (inside every kernel's safe gate range); a, b (a = −κ̂, b = κ̂ ⊙ α, as RWKV-7 forms them)."""
        q = F.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1).to(device, dtype)
        k = F.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1).to(device, dtype)
        v = torch.randn(B, T, H, dv, generator=gen).to(device, dtype)
        x = {"q": q, "k": k, "v": v}
        if "beta" in self.takes:
            x["beta"] = torch.rand(B, T, H, generator=gen).to(device, dtype)
        shape = DECAY_SHAPES[self.decay](B, T, H, dk)
        if shape is not None:
            x["g"] = (-(torch.rand(*shape, generator=gen) * 0.099 + 0.001)).to(device, torch.float32)
        if "a" in self.takes:
            removal = F.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1)
            x["a"] = (-removal).to(device, dtype)
            x["b"] = (removal * torch.rand(B, T, H, dk, generator=gen)).to(device, dtype)
        return x

    def tracker_inputs(self, r: RecurrenceInputs) -> tuple | None:
        """(k, v, β, decay, correction) as float32 numpy for analysis.linalg.spectral_tracker, which follows a scalar
        decay and a rank-one write per token; None where the transition is per channel or low rank (then the
        caller takes every state from the chunked op)."""
        if self.decay == "channel":
            return None
        beta = _array(r.beta)   # numpy, not torch: torch's OpenMP workers would keep spinning on the tracker's cores
        decay = np.ones_like(beta) if r.g is None else np.exp(_array(r.g))
        return _array(r.k), _array(r.v), beta, decay, self.correction

    def kept(self, g, a, b, idx: torch.Tensor) -> tuple:
        """One head's g [T] or [T, dk] and a, b [T, dk] (or None) on the kept key channels idx."""
        return (g[:, idx] if self.decay == "channel" else g), a, b

    def rotated(self, g):
        """One head's g under a rotation of the key channels (PCA): a decay per channel cannot follow one."""
        if self.decay == "channel":
            raise AnalysisError("A rotation cannot keep per-channel decays; pick an axis-aligned strategy.")
        return g


def _array(x: torch.Tensor) -> np.ndarray:
    """A float32 numpy view (no copy for the float32 CPU tensors the recurrence receives)."""
    return x.detach().float().cpu().numpy()


class DeltaRule(Recurrence):
    """The delta rule: decay (none here), then erase along k and write, both with strength β."""
    name = "delta_rule"
    takes = ("q", "k", "v", "beta", "g")
    writes = " with strength β"
    chunked_op = staticmethod(chunked_delta_rule)
    loop_op = staticmethod(recurrent_delta_rule)
    correction = 1.0

    @property
    def update(self) -> str:
        return rf"S_t = (I - \beta_t k_t k_t^\top)\, {DECAY_LATEX[self.decay]}S_{{t-1}} + \beta_t k_t v_t^\top"

    def step(self, S, k, v, beta, g=None, a=None, b=None) -> torch.Tensor:
        if g is not None:
            S = self.decayed(S, g)   # decay first, then the update (as fla)
        return S + torch.outer(k, beta * (v - S.T @ k))

    def decayed(self, S, g):
        return S * g.exp()

    def written(self, k, v, beta):
        """w_j = β_j ‖k_j‖² v_j: a β < 1 write stores only part of v_j."""
        return (k.square().sum(-1) * beta)[:, None] * v

    def gate(self, g, A_log, dt_bias, lower_bound) -> torch.Tensor:
        """fla's in-kernel gate (use_gate_in_kernel): g = −e^{A_log}·softplus(g + dt_bias), per head, fp32."""
        g = g + dt_bias.float() if dt_bias is not None else g
        return -A_log.float().exp() * F.softplus(g)

    def prepare(self, q, k, v, beta=None, g=None, scale=None, initial_state=None, use_qk_l2norm_in_kernel=False,
                use_gate_in_kernel=False, A_log=None, dt_bias=None, use_beta_sigmoid_in_kernel=False,
                allow_neg_eigval=False, state_v_first=False, cu_seqlens=None, gk=None, gv=None, lower_bound=None,
                **_unused) -> RecurrenceInputs:
        """The kernel-side preprocessing of fla's chunk_delta_rule / chunk_gated_delta_rule / chunk_kda (and
        transformers' entry points called with fla's names), in fp32."""
        if gk is not None or gv is not None:
            raise NotImplementedError("per-channel gates (gk/gv) are not taken by the delta-rule ops this prepares")
        H, HV = q.shape[2], v.shape[2]
        q_raw, k_raw = q, k
        if use_qk_l2norm_in_kernel:
            q, k = l2_norm(q), l2_norm(k)
        if HV != H:  # grouped value attention: each q/k head serves HV/H value heads
            q, k = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
        beta = torch.ones_like(v[..., 0], dtype=torch.float32) if beta is None else beta.float()
        if beta.dim() == v.dim():
            raise NotImplementedError("per-channel beta is not taken by the delta-rule ops this prepares")
        if use_beta_sigmoid_in_kernel:
            beta = beta.sigmoid() * (2.0 if allow_neg_eigval else 1.0)
        if g is not None:
            g = g.float()
            if use_gate_in_kernel:
                g = self.gate(g, A_log, dt_bias, lower_bound)
        if initial_state is not None and state_v_first:
            initial_state = initial_state.transpose(-1, -2)
        return RecurrenceInputs(q=q.float(), k=k.float(), v=v.float(), beta=beta, g=g,
                                scale=q.shape[-1] ** -0.5 if scale is None else scale, initial_state=initial_state,
                                cu_seqlens=cu_seqlens, recurrence=self, q_raw=q_raw, k_raw=k_raw)


class GatedDeltaRule(DeltaRule):
    """The delta rule after a scalar decay e^{g_t} per head."""
    name = "gated_delta_rule"
    decay = "head"


class PerChannelDeltaRule(DeltaRule):
    """Kimi Delta Attention: the delta rule after a decay Diag(e^{g_t}) per key channel."""
    name = "per_channel_delta_rule"
    decay = "channel"

    def decayed(self, S, g):
        return S * g.exp()[:, None]

    def gate(self, g, A_log, dt_bias, lower_bound) -> torch.Tensor:
        """fla's in-kernel KDA gate (kda_gate_chunk_cumsum / fused_recurrent_kda), fp32: g [..., HV, dk] with A_log
        [HV] and dt_bias [HV·dk]; lower_bound·sigmoid(e^{A_log}(g + dt_bias)) when a lower bound is set (A_log may
        then be None), −e^{A_log}·softplus(g + dt_bias) otherwise."""
        heads, dk = g.shape[-2:]
        if dt_bias is not None:
            g = g + dt_bias.float().view(heads, dk)
        if lower_bound is not None:
            scaled = g if A_log is None else A_log.float().view(heads, 1).exp() * g
            return lower_bound * torch.sigmoid(scaled)
        return -A_log.float().view(heads, 1).exp() * F.softplus(g)


class DecayingLinearAttention(Recurrence):
    """Linear attention with a scalar decay per head (Mamba-2's SSD, fla's simple GLA): no β, no erase."""
    name = "linear_attention"
    decay = "head"
    takes = ("q", "k", "v", "g")


class GatedLinearAttention(Recurrence):
    """Linear attention with a decay per key channel (GLA): no β, no erase."""
    name = "gated_linear_attention"
    decay = "channel"
    takes = ("q", "k", "v", "g")
    chunked_op = staticmethod(chunked_gated_linear_attention)
    loop_op = staticmethod(recurrent_gated_linear_attention)

    def step(self, S, k, v, beta, g=None, a=None, b=None) -> torch.Tensor:
        return S * g.exp()[:, None] + torch.outer(k, v)

    def prepare(self, q, k, v, gk=None, g=None, scale=None, initial_state=None, state_v_first=False,
                cu_seqlens=None, gv=None, reverse=False, **_unused) -> RecurrenceInputs:
        """fla's `fused_recurrent_gla(q, k, v, gk, …)` / `chunk_gla(q, k, v, g, …)` arguments, fp32."""
        if gv is not None or reverse:
            raise NotImplementedError("value gates (gv) and reverse scans are not taken by the gated-linear-attention ops this prepares")
        if initial_state is not None and state_v_first:
            initial_state = initial_state.transpose(-1, -2)
        return super().prepare(q, k, v, gk if gk is not None else g, scale, initial_state, cu_seqlens)


class DPLRDeltaRule(Recurrence):
    """The diagonal-plus-low-rank generalised delta rule (RWKV-7): S_t = (Diag(e^{g_t}) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ;
    β unused (1)."""
    name = "dplr_delta_rule"
    decay = "channel"
    takes = ("q", "k", "v", "a", "b", "g")
    writes = " through a diagonal-plus-low-rank transition Diag(e^g) + b aᵀ"
    chunked_op = staticmethod(chunked_dplr_delta_rule)
    loop_op = staticmethod(recurrent_dplr_delta_rule)

    @property
    def update(self) -> str:
        return r"S_t = \left(\mathrm{Diag}(e^{g_t}) + b_t a_t^\top\right) S_{t-1} + k_t v_t^\top"

    def step(self, S, k, v, beta, g=None, a=None, b=None) -> torch.Tensor:
        # the low-rank term reads the undecayed S_{t−1}, as fla's DPLR rule
        return g.exp()[:, None] * S + torch.outer(b, a @ S) + torch.outer(k, v)

    def prepare(self, r, w, k, v, a, b=None, kk=None, scale=1.0, initial_state=None, cu_seqlens=None,
                reverse=False, **_unused) -> RecurrenceInputs:
        """`chunk_rwkv7(r, w, k, v, a, b, …)` / `fused_mul_recurrent_rwkv7(r, w, k, v, kk, a, …)` (there `a` is the
        in-context rate α, the transition's a = −κ̂ and b = κ̂ ⊙ α) as prepared inputs, fp32."""
        if reverse:
            raise NotImplementedError("reverse scans are not taken by the DPLR ops this prepares")
        if kk is not None:
            a, b = -kk, kk * a
        return replace(super().prepare(r, k, v, w, scale, initial_state, cu_seqlens), a=a.float(), b=b.float())

    def kept(self, g, a, b, idx: torch.Tensor) -> tuple:
        """Where a is a unit vector per token (RWKV-7's a = −κ̂, b = κ̂ ⊙ α, κ̂ l2-normalised over the head), the
        pruned layer normalises κ̂ over the kept channels: both are divided by ‖a_kept‖ (exact up to the l2 norm's
        eps, 1e-6 beside Σκ²)."""
        a_kept, b_kept = a[:, idx], b[:, idx]
        norm = a.norm(dim=-1, keepdim=True)
        if bool(torch.allclose(norm[norm > 0], torch.ones(()), atol=1e-3)):
            scale = a_kept.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            a_kept, b_kept = a_kept / scale, b_kept / scale
        return g[:, idx], a_kept, b_kept


DELTA_RULE, GATED_DELTA_RULE, PER_CHANNEL_DELTA_RULE = DeltaRule(), GatedDeltaRule(), PerChannelDeltaRule()
LINEAR_ATTENTION, GLA, DPLR_DELTA_RULE = DecayingLinearAttention(), GatedLinearAttention(), DPLRDeltaRule()
RECURRENCES = {r.name: r for r in (DELTA_RULE, GATED_DELTA_RULE, PER_CHANNEL_DELTA_RULE, LINEAR_ATTENTION, GLA,
                                   DPLR_DELTA_RULE)}


def recurrence_named(name: str) -> Recurrence:
    if name not in RECURRENCES:
        raise AnalysisError(f"No recurrence named {name!r}; known: {', '.join(RECURRENCES)}.")
    return RECURRENCES[name]
