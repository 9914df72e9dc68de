"""Issue 31 item 4: one channel-group object per linear layer owns head-major indexing (which rows of every
parameter a key channel spans, key vs value heads, dk, tiles, fp32 state bytes), and one prune-then-measure entry
is what every workflow prunes through.

Per family case (tests/family_cases, a tiny random-init fp32 CPU model):
- the rows the group names for the kept channels are exactly the rows the pruned model holds (bit-identical copies:
  pruning slices, it computes nothing for an axis-aligned strategy), and every row the group does not name comes
  through unchanged;
- the group's fp32 state bytes equal the size of the recurrent state the model really produces (collected, fp32),
  before and after a prune.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

from family_cases import CASE_MODULES

ROOT = Path(__file__).resolve().parents[2]
_models: dict = {}


@pytest.fixture(params=CASE_MODULES)
def model(request):
    try:
        case = importlib.import_module(f"family_cases.{request.param}").CASE
    except ModuleNotFoundError as exc:
        if exc.name == f"family_cases.{request.param}":
            pytest.skip(f"no case module family_cases/{request.param}.py in this checkout")
        raise
    if request.param not in _models:
        _models[request.param] = case.make_model()
    return _models[request.param]


def _pruned(model):
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.prune import prune
    n = len(plan_key_dims(model, ratio=0.0))
    return prune(model, "random", plan_key_dims(model, ratios=[(0.25, 0.5, 0.75)[i % 3] for i in range(n)]), seed=3)


def _rows_of(tensor, rows):
    """A parameter as head-major rows (a [heads, dk, ...] parameter flattened, as ChannelRows.heads_first says)."""
    return tensor.detach().flatten(0, 1) if rows.heads_first else tensor.detach()


def _named(group, entries, size: int) -> torch.Tensor:
    """Bool mask of the rows (of `size`) that the group's head blocks of these entries cover."""
    mask = torch.zeros(size, dtype=torch.bool)
    for rows in entries:
        mask[group.head_index(rows).flatten()] = True
    return mask


def test_the_groups_rows_of_the_kept_channels_are_what_the_pruned_model_keeps(model):
    from analysis.models.channel_group import channel_groups
    result = _pruned(model)
    for before, after, sel in zip(channel_groups(model), channel_groups(result.model), result.selections,
                                  strict=True):
        assert (after.key_heads, after.value_heads, after.key_dim) == (before.key_heads, before.value_heads,
                                                                       sel.kept)
        assert [(r.param, r.role) for r in before.rows] == [(r.param, r.role) for r in after.rows]
        for param in {r.param for r in before.rows}:
            old_entries = [r for r in before.rows if r.param == param]
            new_entries = [r for r in after.rows if r.param == param]
            old = _rows_of(before.module.get_parameter(param), old_entries[0])
            new = _rows_of(after.module.get_parameter(param), new_entries[0])
            for old_rows, new_rows in zip(old_entries, new_entries):
                # [heads, k] rows of the original that the kept channels occupy
                kept = before.head_index(old_rows).gather(1, before.per_block(old_rows, sel.indices.long()))
                assert kept.shape == (before.heads_of(old_rows), sel.kept)
                assert torch.equal(new[after.head_index(new_rows)], old[kept]), (param, old_rows.role)
            # everything else in the parameter (v rows of a fused q|k|v, other heads' blocks) is untouched
            assert torch.equal(new[~_named(after, new_entries, new.shape[0])],
                               old[~_named(before, old_entries, old.shape[0])]), param


def test_the_groups_state_bytes_are_the_real_recurrent_states_size(model):
    from analysis.inspect.states import collect_states
    from analysis.models.channel_group import channel_groups
    from analysis.models.load import describe
    ids = torch.randint(1, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    for m in (model, _pruned(model).model):
        trace = collect_states(m, ids, positions=[ids.shape[1] - 1], keep_states=True, compute_metrics=False)
        groups = channel_groups(m)
        for group, layer in zip(groups, trace.layers, strict=True):
            assert layer.states.dtype == torch.float32               # fla keeps the state in fp32
            per_sequence = layer.states[0].numel() * layer.states.element_size()   # one position of one sequence
            assert group.state_bytes() == per_sequence
            assert group.tiles == -(-group.key_dim // 64)
        assert describe(m).state_bytes_per_sequence == sum(g.state_bytes() for g in groups)


# ---- the one prune-then-measure entry ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lm():
    from analysis.data import corpus
    from family_cases.text_lm import build_tiny
    return build_tiny("delta_net"), corpus.load_tokenizer()


@pytest.fixture
def entry_calls(monkeypatch, tmp_path):
    """Every prune the workflows make, as (strategy, dims, Evaluation): the entry's own prune, spied on."""
    from analysis.io import point_cache
    from analysis.shrink import prune_workflow
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    calls, entry = [], prune_workflow.prune_then_measure

    def spy(model, tokenizer, strategy, dims, calibration, evaluation, **kw):
        calls.append((strategy, list(dims), evaluation))
        return entry(model, tokenizer, strategy, dims, calibration, evaluation, **kw)
    for module in ("analysis.runs.sweep", "analysis.runs.budget_sweep", "analysis.shrink.sensitivity",
                   "analysis.shrink.allocate", "analysis.shrink.stretch_measure"):
        monkeypatch.setattr(f"{module}.prune_then_measure", spy)
    monkeypatch.setattr(prune_workflow, "prune_then_measure", spy)
    return calls


def test_the_sweep_the_map_and_the_allocator_prune_through_the_one_entry(lm, entry_calls):
    from analysis.runs.sweep import sweep
    from analysis.shrink.allocate import allocate, choose_plan, verify
    from analysis.shrink.prune_workflow import Evaluation
    from analysis.shrink.sensitivity import MapSettings, compute_map
    model, tok = lm
    points = list(sweep(model, tok, ["l1"], [0.5], Evaluation(context=32, max_tokens=64, latency=False)))
    assert [(s, d) for s, d, _ in entry_calls] == [("l1", [16, 16])]
    assert entry_calls[0][2] == Evaluation("test", 32, 64, latency=False, confirmed=True)   # the sweep's own settings
    assert points[1]["head_k_dims"] == [16, 16]
    entry_calls.clear()

    s = MapSettings("l1", (0.5,), context=32, eval_tokens=64, calib_sequences=2, calib_tokens=32)
    smap = compute_map(model, tok, s)
    assert sorted(d for _, d, _ in entry_calls) == [[16, 32], [32, 16]]         # one layer at a time
    assert {e for _, _, e in entry_calls} == {Evaluation("validation", 32, 64, latency=False, per_window=True)}
    entry_calls.clear()

    alloc = allocate(smap, mean_ratio=0.25)
    verify(model, tok, smap, alloc)
    choose_plan(model, tok, smap, [{"name": "uniform", "ratios": [0.5, 0.5], "dims": [16, 16]}], "l1",
                use_cache=False)   # the point cache would hide a call that an earlier run already made
    # on the choice tokens, then (the chosen plan is uniform itself) once on held-out tokens
    assert [d for _, d, _ in entry_calls] == [alloc.dims, [16, 16], [16, 16]]
    assert [e.split for _, _, e in entry_calls[1:]] == ["validation", "test"]


def test_prune_and_measure_and_the_budget_sweep_prune_through_the_one_entry(lm, entry_calls):
    from analysis.runs.budget_sweep import budget_sweep
    from analysis.shrink.prune_workflow import Evaluation, prune_and_measure
    model, tok = lm
    evaluation = Evaluation(context=32, max_tokens=64, latency=False)       # the CLI's `prune`, the Prune page
    run = prune_and_measure(model, tok, "l1", [16, 16], None, evaluation)
    assert entry_calls == [("l1", [16, 16], evaluation)] and run.after["head_k_dims"] == [16, 16]
    entry_calls.clear()
    list(budget_sweep(model, tok, "dk", ["l1"], [], [0.5], Evaluation(context=32, max_tokens=64)))
    assert entry_calls == [("l1", [16, 16], Evaluation("test", 32, 64, latency=False, per_window=True))]


def test_nothing_outside_the_entry_prunes():
    """A static check beside the spy: prune() and prune_with_heads() are called in prune_workflow.py only."""
    import re
    callers = []
    for path in [*ROOT.glob("analysis/**/*.py"), *ROOT.glob("ui/**/*.py"), *ROOT.glob("pages/*.py")]:
        text = path.read_text()
        if re.search(r"(?<![\w.])(prune|prune_with_heads)\((?!\))", text.replace("def prune(", "").replace(
                "def prune_with_heads(", "")):
            callers.append(str(path.relative_to(ROOT)))
    assert callers == ["analysis/shrink/prune_workflow.py"]
