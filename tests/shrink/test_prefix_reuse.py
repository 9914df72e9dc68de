"""Layer-prefix reuse (analysis.models.prefix): a pruned model started at its first changed layer on the unpruned
model's kept outputs gives the whole forward's logits (trained samples: every parameter awake), on a pure
linear-attention model and on a hybrid whose softmax-attention blocks need their masks and rotary embeddings."""
import math

import pytest
import torch

from analysis.data import corpus as data
from analysis.models import load as models
from analysis.models.forward import run_batches
from analysis.models.key_plan import key_dims, plan_key_dims
from analysis.models.prefix import PrefixCache
from analysis.shrink.prune import prune
from analysis.shrink.sensitivity import MapSettings, sensitivity_points

pytestmark = pytest.mark.usefixtures("sweep_cache", "one_torch_thread")


def one_layer_pruned(model, layer: int, ratio: float = 0.5):
    n = len(key_dims(model))
    return prune(model, "l1", plan_key_dims(model, ratios=[ratio if i == layer else 0.0 for i in range(n)])).model


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("name, starts", [("gated-deltanet-small", [0, 1, 2, 3]),
                                          ("qwen35-hybrid-small", [0, 1, 2, 4, 5, 6])])  # decoder 3: softmax attention
def test_a_pruned_model_started_at_its_layer_gives_the_whole_forward(name, starts):
    model = models.load_model(name, device="cpu")
    ids = torch.randint(0, 4000, (2, 48), generator=torch.Generator().manual_seed(0))
    cache = PrefixCache(model)
    with torch.no_grad():
        base = cache.logits(model, ids)  # the unpruned model records its layers' outputs
        assert relative_error(base, model(ids, use_cache=False).logits) == 0.0
        for layer, start in enumerate(starts):
            pruned = one_layer_pruned(model, layer)
            whole = pruned(ids, use_cache=False).logits
            assert relative_error(whole, base) > 1e-3  # the prune changes the logits: the check below can fail
            assert cache.first_changed(pruned) == start
            assert relative_error(cache.logits(pruned, ids), whole) <= 1e-5
    assert cache.stats.served == len(starts) - 1 and cache.stats.layers_skipped == sum(starts)
    assert cache.stats.refused is None


def test_past_the_budget_a_batch_is_not_kept_and_runs_whole():
    model = models.load_model("gated-deltanet-small", device="cpu")
    ids = torch.randint(0, 4000, (1, 32), generator=torch.Generator().manual_seed(1))
    cache = PrefixCache(model, budget_bytes=0)
    pruned = one_layer_pruned(model, 2)
    with torch.no_grad():
        cache.logits(model, ids)
        got = cache.logits(pruned, ids)
        assert relative_error(got, pruned(ids, use_cache=False).logits) == 0.0
    assert (cache.stats.not_kept, cache.stats.served, cache.stats.whole, cache.used) == (1, 0, 1, 0)


def test_another_model_or_other_tokens_run_whole():
    model = models.load_model("gated-deltanet-small", device="cpu")
    other = models.load_model("deltanet-small", device="cpu")
    ids = torch.randint(0, 4000, (1, 32), generator=torch.Generator().manual_seed(2))
    cache = PrefixCache(model)
    pruned = one_layer_pruned(model, 3)
    with torch.no_grad():
        cache.logits(model, ids)
        assert cache.first_changed(other) == 0
        cache.logits(other, ids)
        fresh = ids.flip(1)  # tokens the unpruned model never ran (no fill without fill_on_miss)
        assert relative_error(cache.logits(pruned, fresh), pruned(fresh, use_cache=False).logits) == 0.0
    assert (cache.stats.served, cache.stats.whole) == (0, 2)


def test_run_batches_goes_through_the_active_cache_and_fills_on_a_miss():
    model = models.load_model("gated-deltanet-small", device="cpu")
    batches = [torch.randint(0, 4000, (2, 32), generator=torch.Generator().manual_seed(s)) for s in (3, 4)]
    pruned = one_layer_pruned(model, 1)
    want, got = {}, {}
    cache = PrefixCache(model, fill_on_miss=True)
    with torch.no_grad():
        run_batches(pruned, batches, on_logits=lambda i, _at, logits: want.__setitem__(i, logits.clone()))
    with torch.no_grad(), cache.active():
        run_batches(pruned, batches, on_logits=lambda i, _at, logits: got.__setitem__(i, logits.clone()))
    assert cache.stats.recorded == 2 and cache.stats.served == 2
    assert all(relative_error(got[i], want[i]) <= 1e-5 for i in range(2))


def test_the_map_is_unchanged_by_reuse(monkeypatch):
    """Every cell of a map measured with the prefix kept equals the map measured with nothing kept."""
    import analysis.models.prefix as prefix
    model, tok = models.load_model("gated-deltanet-small", device="cpu"), data.load_tokenizer()
    s = MapSettings("l1", (0.5,), context=64, eval_tokens=256, calib_sequences=2, calib_tokens=64)
    served = []
    real = prefix.PrefixCache

    class Spy(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            served.append(self.stats)
    monkeypatch.setattr("analysis.shrink.sensitivity.PrefixCache", Spy)
    reused = list(sensitivity_points(model, tok, s, use_cache=False))
    assert served[0].served == 3 * 1 and served[0].layers_skipped == 1 + 2 + 3  # one batch of 4 windows
    monkeypatch.setattr("analysis.shrink.sensitivity.PrefixCache", lambda m, **k: real(m, budget_bytes=0, **k))
    whole = list(sensitivity_points(model, tok, s, use_cache=False))
    for a, b in zip(reused, whole, strict=True):
        assert a["layer"] == b["layer"] and math.isclose(a["value"], b["value"], rel_tol=1e-5)
        assert math.isclose(a.get("se", 0.0), b.get("se", 0.0), rel_tol=1e-4, abs_tol=1e-9)  # paired over windows
