"""Hand-made inputs for the lab (dk = dv = 4–8): keys a student picks, one-hot values, the same update rules.

Patterns (unit keys, e_i the basis vectors, token t):
    orthogonal       k_t = e_{t mod dk}: every association fits until t ≥ dk, then keys come back
    nearly parallel  k_t = c e_0 + √(1−c²) e_{1 + t mod (dk−1)}: pairwise cosine c², so linear attention's
                     readouts interfere while the delta rule corrects them
    repeated         k_t = e_{t mod ⌈dk/2⌉}: each key is written twice with different values, so the delta rule
                     overwrites the old association and linear attention sums both
Values are one-hot, v_t = e_{t mod dv}; the "model" rule is the gated delta rule with a constant decay α (α = 1:
none, g absent).
"""
from __future__ import annotations

import math

import torch

from analysis.errors import AnalysisError
from analysis.inspect.state_lab.rules import HeadInputs
from analysis.runtime.recurrences import GATED_DELTA_RULE

PATTERNS = ("orthogonal", "nearly parallel", "repeated")


def synthetic_keys(pattern: str, dk: int, n_tokens: int, overlap: float = 0.9) -> torch.Tensor:
    eye = torch.eye(dk)
    t = torch.arange(n_tokens)
    if pattern == "orthogonal":
        return eye[t % dk]
    if pattern == "nearly parallel":
        return overlap * eye[0] + math.sqrt(1 - overlap ** 2) * eye[1 + t % (dk - 1)]
    if pattern == "repeated":
        return eye[t % math.ceil(dk / 2)]
    raise AnalysisError(f"Unknown key pattern {pattern!r}; choose one of {', '.join(PATTERNS)}.")


def synthetic_inputs(pattern: str = "orthogonal", dk: int = 6, n_tokens: int | None = None, beta: float = 1.0,
                     decay: float = 1.0, overlap: float = 0.9) -> HeadInputs:
    """A synthetic head (dk = dv); n_tokens defaults to dk (or 2·⌈dk/2⌉ repeated keys)."""
    if not 2 <= dk <= 16:
        raise AnalysisError(f"The synthetic head needs 2 ≤ dk ≤ 16, got {dk}.")
    n_tokens = dk if n_tokens is None else int(n_tokens)
    if not 1 <= n_tokens <= 64:
        raise AnalysisError(f"The synthetic head reads 1 to 64 tokens, got {n_tokens}.")
    if not 0.0 < beta <= 2.0:
        raise AnalysisError(f"β must lie in (0, 2], got {beta}.")
    if not 0.0 < decay <= 1.0:
        raise AnalysisError(f"The decay α must lie in (0, 1], got {decay}.")
    if not 0.0 <= overlap < 1.0:
        raise AnalysisError(f"The key overlap must lie in [0, 1), got {overlap}.")
    k = synthetic_keys(pattern, dk, n_tokens, overlap)
    v = torch.eye(dk)[torch.arange(n_tokens) % dk]
    g = None if decay == 1.0 else torch.full((n_tokens,), math.log(decay))
    return HeadInputs(q=k.clone(), k=k, v=v, beta=torch.full((n_tokens,), float(beta)), g=g, scale=dk ** -0.5,
                      recurrence=GATED_DELTA_RULE, k_raw=k.clone(), q_raw=k.clone(), unit_keys=True,
                      label=f"synthetic: {pattern} keys{f' (c = {overlap:g})' if pattern == 'nearly parallel' else ''}, "
                            f"dk = dv = {dk}, β = {beta:g}, α = {decay:g}")
