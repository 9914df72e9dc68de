"""The State lab's core: one head's real recurrence inputs, the state after every token under three update rules,
its spectrum, what it can still retrieve, query noise at one token, synthetic inputs and a pruned-dk
variant (its kept channels: analysis.shrink.head_channels).

Nothing here imports streamlit; the page (pages/state_lab.py) caches `observe` per text and `trace_head` per head.
"""
from analysis.inspect.state_lab.observe import MAX_TOKENS, Observation, head_inputs, key_head_of, observe, text_ids
from analysis.inspect.state_lab.probe import noise_probe, validity_label
from analysis.inspect.state_lab.rules import (RULES, HeadInputs, model_rule_is_delta, retrieval_errors, rule_inputs,
                                             rule_recurrence, run_rule, written_values)
from analysis.inspect.state_lab.shrink import pruned_inputs
from analysis.inspect.state_lab.synthetic import PATTERNS, synthetic_inputs
from analysis.inspect.state_lab.trace import TAU, RuleTrace, trace_head, trace_rule

__all__ = ["MAX_TOKENS", "PATTERNS", "RULES", "TAU", "HeadInputs", "Observation", "RuleTrace", "head_inputs",
           "key_head_of", "model_rule_is_delta", "noise_probe", "observe", "pruned_inputs", "retrieval_errors",
           "rule_inputs", "rule_recurrence", "run_rule", "synthetic_inputs", "text_ids", "trace_head", "trace_rule",
           "validity_label", "written_values"]
