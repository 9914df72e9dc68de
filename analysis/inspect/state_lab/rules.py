"""The three update rules the State lab compares, on one head's inputs, token by token (K-first S ∈ ℝ^{dk×dv}).

    model   S_t = (I − β_t k_t k_tᵀ) D_t S_{t−1} + β_t k_t v_tᵀ   the layer's own rule: D_t = e^{g_t} (one decay per
                                                                 head), Diag(e^{g_t}) (per key channel, KDA) or I;
            S_t = D_t S_{t−1} + k_t v_tᵀ                          where the layer has no delta rule (Mamba-2's SSD)
            S_t = (Diag(e^{g_t}) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ   a diagonal-plus-low-rank transition (RWKV-7)
    delta   S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ       the delta rule with the gate removed
    linear  S_t = S_{t−1} + k_t v_tᵀ                               plain linear attention: no β, no delta, no gate

Readout o_t = scale · S_tᵀ q_t. A plain loop (not the chunked form the model runs): a head of a teaching text is
a few hundred tokens, and the loop is the definition itself, shared by the model's inputs and the synthetic ones.

What "v_j" means in the retrieval error ‖S_tᵀk_j − w_j‖/‖w_j‖: w_j is what the rule writes for token j into a
state that holds nothing at k_j, i.e. what S_jᵀk_j reads back right after a clean write:
    delta rules  w_j = β_j ‖k_j‖² v_j    (β-scaled: a β < 1 write stores only part of v_j)
    linear       w_j = ‖k_j‖² v_j
(‖k_j‖ ≈ 1 for l2-normalised keys; the norm's eps leaves tiny keys a little short, hence the factor). The delta
comparison runs on unit keys even where the layer's are raw (`rule_inputs`). Any error above 0 at t = j is interference
from what was stored before; growth for t > j is decay or overwriting.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from analysis.archs.recurrence_words import readout_latex, update_latex as model_rule_latex  # noqa: F401  (the rule `step` runs)
from analysis.errors import AnalysisError
from analysis.runtime.backend import l2_norm

RULES = {"model": "the model's own rule", "delta": "delta rule, no gate", "linear": "plain linear attention"}


@dataclass(frozen=True)
class HeadInputs:
    """One head's prepared recurrence inputs (fp32, CPU), as the kernel receives them."""
    q: torch.Tensor            # [T, dk]
    k: torch.Tensor            # [T, dk]
    v: torch.Tensor            # [T, dv]
    beta: torch.Tensor         # [T]
    g: torch.Tensor | None     # log-decay [T] (per head), [T, dk] (per key channel) or None
    scale: float
    k_raw: torch.Tensor | None = None   # [T, dk] post-conv, before the l2 norm (what pruning zeroes)
    q_raw: torch.Tensor | None = None
    unit_keys: bool = True              # the keys entering the recurrence are l2-normalised
    delta: bool = True                  # False: the layer's own rule is linear attention with its decay (Mamba-2)
    a: torch.Tensor | None = None       # [T, dk] with b: the low-rank part of a DPLR transition (RWKV-7), else None
    b: torch.Tensor | None = None
    label: str = ""                     # where they came from, for captions

    @property
    def tokens(self) -> int:
        return self.k.shape[0]

    @property
    def dims(self) -> tuple[int, int]:
        return self.k.shape[1], self.v.shape[1]

    def with_keys(self, q: torch.Tensor, k: torch.Tensor, g: torch.Tensor | None, label: str,
                  a: torch.Tensor | None = None, b: torch.Tensor | None = None) -> "HeadInputs":
        return replace(self, q=q, k=k, g=g, a=a, b=b, k_raw=None, q_raw=None, label=label)


def rule_form(x: HeadInputs) -> tuple[str, bool]:
    """(gate, delta) of the layer's own rule as `step` runs it: the log-decay's shape and whether it is a delta rule."""
    gate = "none" if x.g is None else ("head" if x.g.dim() == 1 else "channel")
    return gate, x.delta


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise AnalysisError(f"Unknown update rule {rule!r}; choose one of {', '.join(RULES)}.")
    return rule


def step(rule: str, S: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
         g: torch.Tensor | None, delta: bool = True, a: torch.Tensor | None = None,
         b: torch.Tensor | None = None) -> torch.Tensor:
    """One token of `rule`: S [dk, dv], k [dk], v [dv], beta [], g None, [] or [dk]; `delta` False: the model's
    own rule has no delta update (decay, then S += k vᵀ); a, b [dk]: its transition is Diag(e^g) + b aᵀ."""
    if rule == "linear":
        return S + torch.outer(k, v)
    if rule == "model" and a is not None:   # the low-rank term reads the undecayed S_{t−1}, as fla's DPLR rule
        return g.exp()[:, None] * S + torch.outer(b, a @ S) + torch.outer(k, v)
    if rule == "model" and g is not None:
        S = S * (g.exp()[:, None] if g.dim() == 1 else g.exp())  # decay first, then the update (as fla)
    if rule == "model" and not delta:
        return S + torch.outer(k, v)
    return S + torch.outer(k, beta * (v - S.T @ k))


def run_rule(rule: str, x: HeadInputs, S0: torch.Tensor | None = None) -> torch.Tensor:
    """The state after every token, [T, dk, dv] fp32."""
    check_rule(rule)
    dk, dv = x.dims
    S = torch.zeros(dk, dv) if S0 is None else S0.float().clone()
    states = torch.empty(x.tokens, dk, dv)
    at = (lambda z, t: None if z is None else z[t])  # noqa: E731
    for t in range(x.tokens):
        S = step(rule, S, x.k[t], x.v[t], x.beta[t], at(x.g, t), x.delta, at(x.a, t), at(x.b, t))
        states[t] = S
    return states


def rule_inputs(rule: str, x: HeadInputs) -> HeadInputs:
    """The inputs `rule` runs on. The delta rule needs unit keys (with β‖k‖² > 2 its erase step overshoots and the
    state diverges), so on a head whose keys are not l2-normalised (Mamba-2's B, GLA's and RWKV-7's k) the "delta"
    comparison writes, erases and reads with k/‖k‖ (and q/‖q‖); every other rule takes the head's own inputs."""
    if check_rule(rule) != "delta" or x.unit_keys:
        return x
    return replace(x, q=l2_norm(x.q), k=l2_norm(x.k), unit_keys=True)


def written_values(rule: str, x: HeadInputs) -> torch.Tensor:
    """w_j [T, dv]: what a clean write of token j reads back (module docstring)."""
    gain = x.k.square().sum(-1)
    if check_rule(rule) == "delta" or (rule == "model" and x.delta):
        gain = gain * x.beta
    return gain[:, None] * x.v


RETRIEVAL_BLOCK = 64  # states per einsum: bounds the [block, T, dv] readouts to a few MB


def retrieval_errors(states: torch.Tensor, k: torch.Tensor, written: torch.Tensor) -> torch.Tensor:
    """E[t, j] = ‖S_tᵀk_j − w_j‖/‖w_j‖ for j ≤ t, NaN above the diagonal and where w_j = 0 (nothing written)."""
    T = states.shape[0]
    norm = written.norm(dim=-1)
    out = torch.full((T, T), float("nan"))
    for a in range(0, T, RETRIEVAL_BLOCK):
        b = min(T, a + RETRIEVAL_BLOCK)
        read = torch.einsum("tkv,jk->tjv", states[a:b], k)               # [block, T, dv]
        out[a:b] = (read - written[None]).norm(dim=-1) / norm[None]
    later = torch.arange(T)[None, :] > torch.arange(T)[:, None]
    return out.masked_fill(later | (norm == 0)[None, :], float("nan"))
