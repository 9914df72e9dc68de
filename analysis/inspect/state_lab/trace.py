"""Everything the scrubber shows for one head and one rule, computed once: then each step only indexes."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from analysis.linalg.rank import spectral_metrics
from analysis.inspect.state_lab.rules import RULES, HeadInputs, retrieval_errors, rule_inputs, run_rule, written_values

TAU = 1e-3  # numerical-rank threshold (analysis.linalg.rank's default): s_i > τ·s1


@dataclass
class RuleTrace:
    rule: str
    states: torch.Tensor             # [T, dk, dv]: S_t after token t
    singular_values: torch.Tensor    # [T, m]
    numerical_rank: torch.Tensor     # [T]
    rank_utilization: torch.Tensor   # [T]: stable rank / m
    effective_rank: torch.Tensor     # [T]: the headline count of directions (analysis.linalg.rank_card.HEADLINE)
    retrieval_error: torch.Tensor    # [T, T]: [t, j] for j ≤ t, NaN above the diagonal
    written: torch.Tensor            # [T, dv]: the w_j the errors are relative to


def trace_rule(rule: str, x: HeadInputs, tau: float = TAU) -> RuleTrace:
    x = rule_inputs(rule, x)
    states = run_rule(rule, x)
    met = spectral_metrics(states, tau=tau)
    written = written_values(rule, x)
    return RuleTrace(rule, states, met["singular_values"].float(), met["numerical_rank"].float(),
                     met["rank_utilization"].float(), met["effective_rank"].float(),
                     retrieval_errors(states, x.k, written), written)


def trace_head(x: HeadInputs, rules=tuple(RULES), tau: float = TAU) -> dict[str, RuleTrace]:
    """Per rule, the full trace of one head (the lab's precompute)."""
    return {rule: trace_rule(rule, x, tau) for rule in rules}
