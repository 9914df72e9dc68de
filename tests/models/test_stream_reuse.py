"""Layer-prefix reuse for streamed models (analysis.models.stream.reuse): a pruned view of a streamed model, started
at its first changed layer on the unpruned model's layer inputs kept on disk, reads only the blocks from there on
and gives the whole streamed pass's logits (within 1e-5 relative). The model: a tiny DeltaNet with every parameter
awake (family_cases.flags.wake), 6 layers, streamed at 80 % of its weights."""
from __future__ import annotations

import math

import pytest
import torch

from analysis.data import corpus as data
from analysis.io import kept_states
from analysis.models import budget, load as models
from analysis.models.forward import run_batches
from analysis.models.key_plan import key_dims, plan_key_dims
from analysis.models.prefix import PrefixCache
from analysis.models.stream.model import StreamedModel
from analysis.shrink.prune import prune
from family_cases.flags import unawake, wake
from family_cases.text_lm import build_tiny

pytestmark = pytest.mark.usefixtures("sweep_cache", "one_torch_thread")

LAYERS = 6


@pytest.fixture(scope="module")
def awake_dir(tmp_path_factory):
    model = build_tiny("delta_net", num_hidden_layers=LAYERS)
    wake(model, 1)
    assert unawake(model) == []
    path = tmp_path_factory.mktemp("awake-stream") / "model"
    model.save_pretrained(path, max_shard_size="200KB")
    return path, int(sum(p.numel() * p.element_size() for p in model.parameters()) * 0.8)


def streamed(awake_dir) -> StreamedModel:
    path, size = awake_dir
    with budget.budget_scope(size):
        model = models.load_model(str(path), device="cpu")
    assert isinstance(model, StreamedModel)
    return model


def one_layer_pruned(model, layer: int, ratio: float = 0.5):
    n = len(key_dims(model))
    return prune(model, "l1", plan_key_dims(model, ratios=[ratio if i == layer else 0.0 for i in range(n)])).model


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def logits_of(model, batches) -> dict:
    got = {}

    def keep(m, first, logits):
        got.setdefault(m, []).append((first, logits.clone()))
    run_batches(model, batches, on_logits=keep)
    return {m: torch.cat([x for _, x in sorted(parts, key=lambda p: p[0])], dim=1) for m, parts in got.items()}


def test_a_streamed_view_started_at_its_layer_reads_only_later_blocks_and_gives_the_whole_pass(awake_dir, sweep_cache):
    model = streamed(awake_dir)
    batches = [torch.randint(0, 500, (2, 24), generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    cache = PrefixCache(model)
    with torch.no_grad():
        with cache.active():
            base = logits_of(model, batches)  # the unpruned pass keeps every layer's input, on disk
        assert model.last_run["blocks_read"] == LAYERS
        files = sorted(p.name for p in cache.streamed.kept.folder.iterdir())
        assert cache.streamed.kept.folder.parent == kept_states.kept_root()
        assert len([f for f in files if f.endswith(".safetensors")]) == 2 * (LAYERS - 1)
        for layer in range(LAYERS):
            view = one_layer_pruned(model, layer)
            whole = logits_of(view, batches)  # outside the scope: the view's whole streamed pass
            assert view.last_run["blocks_read"] == LAYERS
            assert all(rel(whole[m], base[m]) > 1e-3 for m in whole)  # the prune changes the logits
            assert cache.first_changed(view) == layer
            with cache.active():
                reused = logits_of(view, batches)
            assert view.last_run["blocks_read"] == LAYERS - layer  # only the blocks from its layer on
            assert all(rel(reused[m], whole[m]) <= 1e-5 for m in whole)
    assert cache.stats.blocks_skipped == sum(range(LAYERS)) and cache.stats.served == 2 * (LAYERS - 1)
    folder = cache.streamed.kept.folder
    cache.close()
    assert not folder.exists()


def test_past_the_disk_bound_nothing_is_kept_and_points_recompute(awake_dir, monkeypatch):
    monkeypatch.setattr(kept_states, "DISK_SHARE", 0.0)  # no room: every state is recomputed by its point
    model = streamed(awake_dir)
    batches = [torch.randint(0, 500, (1, 16), generator=torch.Generator().manual_seed(3))]
    view = one_layer_pruned(model, 3)
    cache = PrefixCache(model, fill_on_miss=True)
    with torch.no_grad():
        whole = logits_of(view, batches)
        with cache.active():
            got = logits_of(view, batches)  # fills (the unpruned pass), keeps nothing, runs whole
    assert view.last_run["blocks_read"] == LAYERS
    assert cache.stats.not_kept == LAYERS - 1 and cache.stats.served == 0 and cache.stats.whole == 1
    assert rel(got[0], whole[0]) == 0.0


def test_a_streamed_map_is_unchanged_by_reuse_and_reads_fewer_blocks(awake_dir, monkeypatch):
    """The sensitivity map of the streamed model with its layer inputs kept equals the map with nothing kept."""
    from analysis.shrink import sensitivity
    from analysis.shrink.sensitivity import MapSettings, sensitivity_points
    model, tok = streamed(awake_dir), data.load_tokenizer()
    s = MapSettings("l1", (0.5,), context=32, eval_tokens=64, calib_sequences=2, calib_tokens=32)
    seen, real = [], sensitivity.PrefixCache

    def spy(*a, **k):
        seen.append(real(*a, **k))
        return seen[-1]
    monkeypatch.setattr(sensitivity, "PrefixCache", spy)
    with torch.no_grad():
        reused = list(sensitivity_points(model, tok, s, use_cache=False))
    stats = seen[0].stats
    assert stats.blocks_skipped == sum(range(LAYERS)) and stats.blocks_read == LAYERS * (LAYERS + 1) - sum(range(LAYERS))
    monkeypatch.setattr(kept_states, "DISK_SHARE", 0.0)
    with torch.no_grad():
        whole = list(sensitivity_points(model, tok, s, use_cache=False))
    assert seen[1].stats.blocks_skipped == 0
    for a, b in zip(reused, whole, strict=True):
        assert a["layer"] == b["layer"] and math.isclose(a["value"], b["value"], rel_tol=1e-5)


@pytest.mark.parametrize("family", ["rwkv7", "qwen3_5"])
def test_carried_tensors_and_attention_blocks_resume_exactly(family, tmp_path):
    """RWKV-7's layers hand v_first on (kept beside the hidden state); Qwen3.5's softmax-attention blocks are never
    pruned, so a point pruning the linear layer before one starts after it. Family cases made 3× deeper, every
    parameter awake, streamed at 80 % of their weights."""
    import importlib

    from family_cases.deeper import deeper_model
    built = deeper_model(importlib.import_module(f"family_cases.{family}").CASE.make_model(), 3)
    wake(built, 1)
    assert unawake(built) == []
    built.save_pretrained(tmp_path / "model", max_shard_size="300KB")
    with budget.budget_scope(int(sum(p.numel() * p.element_size() for p in built.parameters()) * 0.8)):
        model = models.load_model(str(tmp_path / "model"), device="cpu")
        assert isinstance(model, StreamedModel)
        depth, n = len(model.skeleton.layers), len(key_dims(model))
        batches = [torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(s))
                   for s in (0, 1)]
        cache = PrefixCache(model)
        starts = []
        with torch.no_grad():
            with cache.active():
                base = logits_of(model, batches)
            for layer in range(n):
                view = one_layer_pruned(model, layer)
                whole = logits_of(view, batches)
                with cache.active():
                    reused = logits_of(view, batches)
                starts.append(cache.first_changed(view))
                assert view.last_run["blocks_read"] == depth - starts[-1]
                assert all(rel(whole[m], base[m]) > 1e-3 and rel(reused[m], whole[m]) <= 1e-5 for m in whole)
        cache.close()
    assert starts == sorted(starts) and starts[0] == 0 and starts[-1] > 0
    if family == "qwen3_5":  # decoder layers 3, 7, 11 are softmax attention: no linear layer starts there
        assert not {3, 7, 11} & set(starts)


def test_kept_states_reclaim_only_their_own_dead_folders(tmp_path):
    """A folder left by a killed set (its lock no longer held, only kept_states' files) is removed by the next set;
    a live set's folder and a folder holding anything else are left alone."""
    root = tmp_path / "prefix"
    live = kept_states.KeptStates(root)
    assert live.put(0, 1, [torch.ones(3)])
    dead = root / "run-dead"
    dead.mkdir()
    (dead / kept_states.LOCK_NAME).write_text("")
    (dead / "b0-l1.safetensors").write_bytes(b"x")
    foreign = root / "run-foreign"
    foreign.mkdir()
    (foreign / kept_states.LOCK_NAME).write_text("")
    (foreign / "notes.txt").write_text("a user's file")
    other = kept_states.KeptStates(root)
    assert other.put(0, 1, [torch.zeros(2)])
    assert not dead.exists() and (foreign / "notes.txt").exists() and live.folder.exists()
    assert torch.equal(live.get(0, 1)[0], torch.ones(3)) and live.get(0, 2) is None
    for kept in (live, other):
        folder = kept.folder
        kept.close()
        assert not folder.exists() and not kept.put(0, 2, [torch.ones(1)])
