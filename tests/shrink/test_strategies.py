"""Every registered strategy through one interface, plus what makes each one what it claims to be."""
import copy

import pytest
import torch

from analysis.data import corpus as data
from analysis.shrink.calibration import calibrate
from analysis.errors import AnalysisError
from analysis.shrink.importance import jaccard, kept_mask
from analysis.models.load import attention_layers
from analysis.models.key_plan import plan_key_dims
from analysis.shrink.strategies import STRATEGIES, get_strategy
from family_cases.text_lm import build_tiny


@pytest.fixture(scope="module", params=["delta_net", "gated_deltanet"])
def model_and_calib(request):
    model = build_tiny(request.param)
    return model, calibrate(model, data.load_tokenizer(), n_sequences=4, seq_len=128)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_interface(model_and_calib, name):
    model, calib = model_and_calib
    strategy = get_strategy(name)
    scores = strategy.scores(model, calib)
    assert len(scores) == 2 and all(s.shape == (2, 32) and torch.isfinite(s).all() for s in scores)
    dims = [20, 9]
    selections = strategy.select(model, calib, dims)
    for sel, k in zip(selections, dims):
        assert sel.kept == k
        if strategy.axis_aligned:
            idx = sel.indices
            assert idx.shape == (2, k)
            assert all(len(set(row.tolist())) == k for row in idx)           # no duplicates
            assert torch.equal(idx, idx.sort(dim=-1).values) and idx.min() >= 0 and idx.max() < 32
        else:
            T = sel.projection                                                 # orthonormal rows
            assert torch.allclose(T @ T.transpose(-1, -2), torch.eye(k).expand(2, k, k), atol=1e-4)
    # deterministic under the seed
    again = strategy.select(model, calib, dims)
    for a, b in zip(selections, again):
        assert torch.equal(a.indices, b.indices) if a.indices is not None else torch.allclose(a.projection, b.projection)


def test_l1_and_wanda_follow_their_formulas(model_and_calib):
    model, calib = model_and_calib
    attn = model.model.layers[0].attn
    wq = attn.q_proj.weight.detach().reshape(2, 32, -1)
    wk = attn.k_proj.weight.detach().reshape(2, 32, -1)
    l1 = get_strategy("l1").scores(model, calib)[0]
    assert torch.allclose(l1, wq.abs().sum(-1) + wk.abs().sum(-1))
    wanda = get_strategy("wanda").scores(model, calib)[0]
    assert torch.allclose(wanda, ((wq.abs() + wk.abs()) * calib.layers[0].input_rms).sum(-1), rtol=1e-5)


def test_gradients_use_a_private_copy(model_and_calib):
    model, calib = model_and_calib
    before = {k: v.clone() for k, v in model.state_dict().items()}
    grads = calib.gradients()
    assert len(grads) == 2 and grads[0][0].shape == model.model.layers[0].attn.q_proj.weight.shape
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_gradients_weight_every_sequence_equally():
    """5 sequences (not a multiple of the backward batch of 4) against one sequence at a time."""
    model = build_tiny("gated_deltanet")
    calib = calibrate(model, data.load_tokenizer(), n_sequences=5, seq_len=32)
    reference = copy.deepcopy(model).float()
    for seq in calib.input_ids:
        reference(seq[None], labels=seq[None], use_cache=False).loss.backward()
    for (gq, gk), attn in zip(calib.gradients(), attention_layers(reference)):
        for got, want in ((gq, attn.q_proj.weight.grad), (gk, attn.k_proj.weight.grad)):
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-7 * want.abs().max().item())


def test_drrqr_reports_rrqr_guarantee(model_and_calib):
    model, calib = model_and_calib
    sel = get_strategy("drrqr").select(model, calib, [16, 16])[0]
    for head in sel.details["rrqr"]:
        assert head["converged"] and head["max_rho"] <= 1.5 + 1e-9


def test_agreement_and_unknown_strategy(model_and_calib):
    model, calib = model_and_calib
    dims = plan_key_dims(model, ratio=0.5)
    masks = {name: kept_mask(model, calib, name, dims) for name in ("l1", "wanda", "pca")}
    assert masks["pca"] is None  # PCA is not axis-aligned: no channel mask
    assert torch.all(jaccard(masks["l1"][0], masks["l1"][0]) == 1)
    with pytest.raises(AnalysisError, match="choose one of random, l1, wanda, grad, pca, drrqr"):
        get_strategy("magic")
