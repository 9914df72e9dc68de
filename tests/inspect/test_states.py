"""State collection: matches the model's cache, prefix runs and the token-by-token recurrence."""
import pytest
import torch

from analysis.errors import AnalysisError
from analysis.linalg.rank import spectral_metrics
from analysis.inspect.states import collect_states, select_positions
from family_cases.text_lm import build_tiny


def k_first(state, kind):
    return state.transpose(-1, -2) if kind == "gated_deltanet" else state


@pytest.mark.parametrize("kind", ["delta_net", "gated_deltanet"])
def test_states_match_cache_and_prefix(kind):
    model = build_tiny(kind)
    ids = torch.randint(0, 8192, (2, 150), generator=torch.Generator().manual_seed(1))
    trace = collect_states(model, ids, stride=10, keep_states=True)
    assert trace.positions[-1] == 149 and trace.positions[:3] == [0, 10, 20]
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        prefix = model(ids[:, :41], use_cache=True).past_key_values
    for i, layer in enumerate(trace.layers):
        final = k_first(cache[i]["recurrent_state"], kind)
        assert torch.allclose(layer.states[:, :, -1], final, atol=1e-5)
        assert torch.allclose(layer.final_state, final, atol=1e-5)
        at_40 = layer.states[:, :, trace.positions.index(40)]
        assert torch.allclose(at_40, k_first(prefix[i]["recurrent_state"], kind), rtol=1e-4, atol=1e-5)
        # streamed metrics are the metrics of the kept states
        direct = spectral_metrics(layer.states)["rank_utilization"]
        assert torch.allclose(layer.metrics["rank_utilization"], direct, atol=1e-6)


def test_gated_states_include_the_decay():
    """A Gated DeltaNet state traced without its gate (the reference code's bug) would differ."""
    model = build_tiny("gated_deltanet")
    attn = model.model.layers[0].attn
    with torch.no_grad():
        attn.A_log.fill_(2.0)  # strong decay
    ids = torch.randint(0, 8192, (1, 80), generator=torch.Generator().manual_seed(2))
    trace = collect_states(model, ids, positions=[79])
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    assert torch.allclose(trace.layers[0].final_state, cache[0]["recurrent_state"].transpose(-1, -2), atol=1e-5)


def test_positions_and_stride_validation():
    assert select_positions(5, stride=2) == [0, 2, 4]
    assert select_positions(6, stride=4) == [0, 4, 5]
    assert select_positions(10, positions=[3, 1]) == [1, 3]
    with pytest.raises(AnalysisError, match="Stride"):
        select_positions(10, stride=0)
    with pytest.raises(AnalysisError, match="Positions"):
        select_positions(10, positions=[10])
    with pytest.raises(AnalysisError, match="No tokens"):
        select_positions(0)


@pytest.mark.parametrize("kind", ["delta_net", "gated_deltanet"])
def test_cpu_collection_runs_the_recurrence_once_and_forms_only_requested_states(kind, monkeypatch):
    """On CPU the forward's own recurrence hands the states over (no replay), and only the asked-for ones."""
    from analysis.runtime.cpu_ops import delta_rule
    from analysis.runtime.recurrences import DeltaRule
    model = build_tiny(kind)
    ids = torch.randint(0, 8192, (1, 150), generator=torch.Generator().manual_seed(3))
    runs, formed = [], []
    real_rule, real_states_at = DeltaRule.chunked_op, delta_rule.states_at
    monkeypatch.setattr(DeltaRule, "chunked_op", staticmethod(lambda *a, **k: runs.append(1) or real_rule(*a, **k)))
    monkeypatch.setattr(delta_rule, "states_at", lambda *a: formed.append(len(a[-1])) or real_states_at(*a))
    trace = collect_states(model, ids, stride=64, keep_states=True)
    n_layers = len(trace.layers)
    assert len(runs) == n_layers                       # one recurrence per layer: the forward's own
    assert sum(formed) == n_layers * len(trace.positions) == n_layers * 4  # tokens 0, 64, 128, 149
    monkeypatch.undo()
    full = collect_states(model, ids, stride=1, keep_states=True)
    for layer, ref in zip(trace.layers, full.layers):
        assert torch.allclose(layer.states, ref.states[:, :, trace.positions], atol=1e-6)


def test_every_token_trace_comes_from_the_same_single_pass(monkeypatch):
    """`rank --every-token` needs one forward: the dense trace rides on collect_states' pass and equals
    collect_utilization_trace's own."""
    from analysis.inspect.rank_trace import collect_utilization_trace
    from analysis.runtime.recurrences import DeltaRule
    model = build_tiny("gated_deltanet")
    ids = torch.randint(0, 8192, (2, 90), generator=torch.Generator().manual_seed(4))
    alone = collect_utilization_trace(model, ids)
    runs = []
    real_rule = DeltaRule.chunked_op
    monkeypatch.setattr(DeltaRule, "chunked_op", staticmethod(lambda *a, **k: runs.append(1) or real_rule(*a, **k)))
    trace = collect_states(model, ids, stride=30, every_token=True)
    assert len(runs) == len(trace.layers)
    for layer, ref in zip(trace.layers, alone):
        assert torch.equal(layer.every_token["rank_utilization"], ref["rank_utilization"])


def test_states_traced_in_batches_are_those_of_one_batch():
    """Issue 41: head statistics of a streamed model trace their sequences in batches the budget holds; each layer's
    k-th call is batch k, in memory as streamed, and the joined trace is the one-batch trace."""
    model = build_tiny("gated_deltanet")
    ids = torch.randint(0, 8192, (5, 24), generator=torch.Generator().manual_seed(0))
    one = collect_states(model, ids, positions=[3, 11, 23], keep_states=True)
    split = collect_states(model, ids, positions=[3, 11, 23], keep_states=True, batch=2)
    assert split.batch == 5 and len(split.layers) == len(one.layers)
    for a, b in zip(one.layers, split.layers):
        assert torch.allclose(b.states, a.states, rtol=1e-5, atol=1e-7)
        assert torch.allclose(b.final_state, a.final_state, rtol=1e-5, atol=1e-7)
        for name in a.metrics:
            assert torch.allclose(b.metrics[name], a.metrics[name], rtol=1e-4, atol=1e-6, equal_nan=True), name
    assert torch.allclose(split.logits, one.logits, rtol=1e-5, atol=1e-6)
