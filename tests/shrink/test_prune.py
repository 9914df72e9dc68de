"""Structured pruning: exact slicing, a new model every time, save/load round trip, bad input."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from analysis.data import corpus as data
from analysis.shrink.calibration import calibrate
from analysis.errors import AnalysisError
from analysis.shrink.prune import prune
from analysis.models.key_plan import plan_key_dims, tiles
from analysis.io.model_dir import save_model
from analysis.shrink.strategies.base import Selection
from analysis.shrink.prune import build_pruned
from family_cases.text_lm import build_tiny


def test_plan_key_dims_and_rounding():
    model = build_tiny("delta_net", expand_k=2.0)  # dk = 64
    assert plan_key_dims(model, ratio=0.5) == [32, 32]
    assert plan_key_dims(model, ratios=[0.25, 0.8]) == [48, 12]
    assert plan_key_dims(model, ratios=[0.3, 0.8], round_to=16) == [48, 16]
    assert tiles([64, 65, 128, 16]) == [1, 2, 2, 1]
    for kwargs, message in [({"ratio": 1.0}, r"\[0, 1\)"), ({"ratio": -0.1}, r"\[0, 1\)"),
                            ({"ratios": [0.5]}, "one per layer"), ({"ratio": 0.999}, "leaves no key channels"),
                            ({}, "either one")]:
        with pytest.raises(AnalysisError, match=message):
            plan_key_dims(model, **kwargs)


@pytest.mark.parametrize("kind", ["delta_net", "gated_deltanet"])
def test_pruned_model_equals_manual_slice_and_round_trips(kind, tmp_path):
    model = build_tiny(kind)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    keep = torch.tensor([[0, 3, 5, 31], [1, 2, 8, 9]])
    pruned = build_pruned(model, [Selection(indices=keep), Selection(indices=keep)])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())     # input untouched
    attn, new = model.model.layers[0].attn, pruned.model.layers[0].attn
    rows = (torch.arange(2)[:, None] * 32 + keep).flatten()
    assert torch.equal(new.q_proj.weight, attn.q_proj.weight[rows])
    assert torch.equal(new.k_conv1d.weight, attn.k_conv1d.weight[rows])
    assert new.head_k_dim == 4 and torch.equal(new.v_proj.weight, attn.v_proj.weight)
    # The pruned layer equals the original layer with the dropped channels' projections removed:
    # check the recurrence inputs directly through a forward of both models on the kept channels.
    ids = torch.randint(0, 8192, (2, 70), generator=torch.Generator().manual_seed(0))
    logits = pruned(ids).logits
    save_model(pruned, tmp_path / "out", metadata={"note": "test"})
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert loaded.config.head_k_dims == [4, 4]
    assert torch.allclose(loaded(ids).logits, logits)
    assert json.loads((tmp_path / "out" / "pruning.json").read_text())["note"] == "test"
    with pytest.raises(AnalysisError, match="already exists"):
        save_model(pruned, tmp_path / "out")


def test_ratio_zero_is_identity_and_per_layer_dims():
    model = build_tiny("gated_deltanet")
    calib = calibrate(model, data.load_tokenizer(), n_sequences=2, seq_len=64)
    ids = torch.randint(0, 8192, (1, 90), generator=torch.Generator().manual_seed(1))
    same = prune(model, "wanda", plan_key_dims(model, ratio=0.0), calib)
    assert torch.allclose(same.model(ids).logits, model(ids).logits, atol=1e-6)
    mixed = prune(model, "drrqr", plan_key_dims(model, ratios=[0.5, 0.75]), calib)
    with torch.no_grad():
        cache = mixed.model(ids, use_cache=True).past_key_values
    assert [cache[i]["recurrent_state"].shape[-1] for i in range(2)] == [16, 8]  # V-first [.., dv, dk]


def test_prune_needs_calibration_and_fitting_dims():
    model = build_tiny("delta_net")
    with pytest.raises(AnalysisError, match="needs calibration"):
        prune(model, "wanda", [16, 16], None)
    with pytest.raises(AnalysisError, match="do not fit"):
        prune(model, "random", [16], None)
    with pytest.raises(AnalysisError, match="Unknown strategy"):
        prune(model, "nope", [16, 16], None)


def test_cli_prune_says_readout_scale_and_calibration_used(tiny_dirs, tmp_path):
    from analysis.cli.main import main
    common = ["--ratio", "0.5", "--eval-tokens", "256", "--calib-sequences", "3", "--calib-tokens", "32"]
    assert main(["prune", str(tiny_dirs["delta_net"]), "--strategy", "wanda", "--rescale", "default", *common,
                 "--out", str(tmp_path / "a"), "--json", str(tmp_path / "a.json")]) == 0
    payload = json.loads((tmp_path / "a.json").read_text())
    assert payload["rescale"] == "default" and "reference code" in payload["readout"]
    assert payload["calibration"] == "3×32 tokens of the Shakespeare train split"
    saved = json.loads((tmp_path / "a" / "pruning.json").read_text())
    assert saved["rescale"] == "default" and saved["readout_key_dims"] is None
    assert main(["prune", str(tiny_dirs["delta_net"]), "--strategy", "l1", *common,
                 "--out", str(tmp_path / "b"), "--json", str(tmp_path / "b.json")]) == 0
    payload = json.loads((tmp_path / "b.json").read_text())
    assert payload["rescale"] == "original" and payload["calibration"] == "none (data-free)"
    assert json.loads((tmp_path / "b" / "config.json").read_text())["readout_key_dims"] == [32, 32]
    with pytest.raises(AnalysisError, match="one of original, default"):
        prune(build_tiny("delta_net"), "l1", [16, 16], rescale="dk-prime")
