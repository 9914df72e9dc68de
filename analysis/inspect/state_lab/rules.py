"""The three update rules the State lab compares, on one head's inputs, token by token (K-first S ∈ ℝ^{dk×dv}).

    model   the layer's own rule: its recurrence's `step` (analysis.runtime.recurrences), e.g.
            S_t = (I − β_t k_t k_tᵀ) D_t S_{t−1} + β_t k_t v_tᵀ   a delta rule, D_t = e^{g_t}, Diag(e^{g_t}) or I;
            S_t = D_t S_{t−1} + k_t v_tᵀ                          linear attention with a decay (Mamba-2's SSD, GLA)
            S_t = (Diag(e^{g_t}) + b_t a_tᵀ) S_{t−1} + k_t v_tᵀ   a diagonal-plus-low-rank transition (RWKV-7)
    delta   S_t = (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ       the delta rule with the gate removed
    linear  S_t = S_{t−1} + k_t v_tᵀ                               plain linear attention: no β, no delta, no gate

Readout o_t = scale · S_tᵀ q_t. A plain loop (not the chunked form the model runs): a head of a teaching text is
a few hundred tokens, and the loop is the definition itself, shared by the model's inputs and the synthetic ones.

What "v_j" means in the retrieval error ‖S_tᵀk_j − w_j‖/‖w_j‖: w_j is what the rule writes for token j into a
state that holds nothing at k_j, i.e. what S_jᵀk_j reads back right after a clean write (`Recurrence.written`):
    delta rules  w_j = β_j ‖k_j‖² v_j    (β-scaled: a β < 1 write stores only part of v_j)
    linear       w_j = ‖k_j‖² v_j
(‖k_j‖ ≈ 1 for l2-normalised keys; the norm's eps leaves tiny keys a little short, hence the factor). The delta
comparison runs on unit keys even where the layer's are raw (`rule_inputs`). Any error above 0 at t = j is interference
from what was stored before; growth for t > j is decay or overwriting.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from analysis.errors import AnalysisError
from analysis.runtime.recurrences import DELTA_RULE, LINEAR_ATTENTION, Recurrence, l2_norm

RULES = {"model": "the model's own rule", "delta": "delta rule, no gate", "linear": "plain linear attention"}
UNGATED = {"delta": DELTA_RULE, "linear": LINEAR_ATTENTION}   # the comparison rules: run without g, a, b


@dataclass(frozen=True)
class HeadInputs:
    """One head's prepared recurrence inputs (fp32, CPU), as the kernel receives them."""
    q: torch.Tensor            # [T, dk]
    k: torch.Tensor            # [T, dk]
    v: torch.Tensor            # [T, dv]
    beta: torch.Tensor         # [T]
    g: torch.Tensor | None     # log-decay [T] (per head), [T, dk] (per key channel) or None
    scale: float
    recurrence: Recurrence     # the layer's own rule (analysis.runtime.recurrences)
    k_raw: torch.Tensor | None = None   # [T, dk] post-conv, before the l2 norm (what pruning zeroes)
    q_raw: torch.Tensor | None = None
    unit_keys: bool = True              # the keys entering the recurrence are l2-normalised
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


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise AnalysisError(f"Unknown update rule {rule!r}; choose one of {', '.join(RULES)}.")
    return rule


def rule_recurrence(rule: str, x: HeadInputs) -> Recurrence:
    """The recurrence `rule` steps: the layer's own for "model", else the ungated comparison rule."""
    return x.recurrence if check_rule(rule) == "model" else UNGATED[rule]


def model_rule_is_delta(x: HeadInputs) -> bool:
    """The layer's own rule is the plain delta rule (no gate), so its curves and the "delta" rule's coincide."""
    return x.recurrence is DELTA_RULE


def run_rule(rule: str, x: HeadInputs, S0: torch.Tensor | None = None) -> torch.Tensor:
    """The state after every token, [T, dk, dv] fp32: one `Recurrence.step` per token (g, a, b for "model" only)."""
    recurrence = rule_recurrence(rule, x)
    dk, dv = x.dims
    S = torch.zeros(dk, dv) if S0 is None else S0.float().clone()
    states = torch.empty(x.tokens, dk, dv)
    own = (lambda z, t: None if z is None or rule != "model" else z[t])  # noqa: E731
    for t in range(x.tokens):
        S = recurrence.step(S, x.k[t], x.v[t], x.beta[t], own(x.g, t), own(x.a, t), own(x.b, t))
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
    return rule_recurrence(rule, x).written(x.k, x.v, x.beta)


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
