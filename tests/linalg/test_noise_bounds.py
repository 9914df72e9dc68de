"""Query noise on a model whose kernel does not l2-normalise q and k (Mamba-2's C and B): the report says which
figures apply, runs its Monte Carlo with the raw query the scan reads, and labels the re-normalised series as
comparison only — in the core report, in the CLI JSON and in its text."""
import json

import pytest
import torch

from family_cases.mamba2 import make_model

SNR = [0.0, 20.0]


@pytest.fixture(scope="module")
def trace():
    from analysis.inspect.states import collect_states
    model = make_model("nemotron_h")
    ids = torch.randint(1, 97, (3, 24), generator=torch.Generator().manual_seed(1))
    return collect_states(model, ids, positions=[23], compute_metrics=False, keep_states=True, keep_keys=4)


def test_raw_query_report_labels_and_monte_carlo(trace):
    from analysis.inspect.noise_report import RAW_FIGURES, RENORMALISED_PREDICTIONS, noise_report
    report = noise_report(trace, SNR, n_samples=2000, seed=0, qk_l2_normalised=False)
    assert report["query_l2_normalised"] is False and report["monte_carlo_query"].startswith("raw")
    assert report["apply_to_this_model"] == list(RAW_FIGURES)
    assert report["comparison_only"] == list(RENORMALISED_PREDICTIONS)
    assert "comparison only" in report["validity"] and "raw query" in report["noise_model"]
    S = trace.layers[0].final_state if trace.layers[0].states is None else trace.layers[0].states[:, :, -1]
    head = report["layers"][0]["heads"][0]
    probe = head["mc_real_keys"]
    assert probe["monte_carlo_query"] == "raw" and "mc_rms" not in probe and "mc_raw_rms" in probe
    # every key the JSON lists is in the probe or the head it describes (no label for a figure that is absent)
    present = set(probe) | set(head)
    assert set(report["comparison_only"]) <= present and set(report["apply_to_this_model"]) <= present
    # independent reference: E‖Sᵀε‖² = σ² ‖S‖_F², σ² = ‖k‖²/(dk·10^(snr/10)), per key; RMS over the keys
    keys = trace.layers[0].keys[:, 0].double()                     # [B, n, dk]
    Sh = S[:, 0].double()                                          # [B, dk, dv]
    dk = keys.shape[-1]
    for i, snr in enumerate(SNR):
        sigma2 = keys.square().sum(-1) / (dk * 10 ** (snr / 10))  # [B, n]
        rel2 = sigma2 * Sh.square().sum((-1, -2))[:, None] / torch.einsum("bkv,bnk->bnv", Sh, keys).square().sum(-1)
        exact = rel2.mean(1).sqrt()                                # [B]
        assert probe["predicted_raw"]["median"][i] == pytest.approx(float(exact.median()), rel=1e-6)
        # Monte Carlo of 2000 draws per key: the RMS is within a few % of the exact value (std ≈ 1/sqrt(2·2000·dv))
        assert probe["mc_raw_rms"]["median"][i] == pytest.approx(float(exact.median()), rel=0.05)
        assert abs(probe["raw_error_vs_mc"][i]) < 0.05


def test_normalised_report_keeps_the_renormalised_monte_carlo(trace):
    from analysis.inspect.noise_report import noise_report
    report = noise_report(trace, SNR, n_samples=16, seed=0, qk_l2_normalised=True)
    probe = report["layers"][0]["heads"][0]["mc_real_keys"]
    assert report["comparison_only"] == [] and probe["monte_carlo_query"] == "re-normalised" and "mc_rms" in probe


def test_cli_noise_json_and_text_carry_the_labels(tmp_path, capsys):
    from analysis.data import corpus as data
    from analysis.cli.main import main
    model = make_model("nemotron_h")
    model.resize_token_embeddings(len(data.load_tokenizer()), mean_resizing=False)
    model.save_pretrained(tmp_path / "m")
    args = ["noise", str(tmp_path / "m"), "--device", "cpu", "--tokens", "16", "--batch", "2", "--samples", "8",
            "--snr", "0,20", "--keys", "2"]
    assert main([*args, "--json", str(tmp_path / "noise.json")]) == 0
    report = json.loads((tmp_path / "noise.json").read_text())
    assert report["query_l2_normalised"] is False and "first_order" in report["comparison_only"]
    probe = report["layers"][0]["heads"][0]["mc_real_keys"]
    assert probe["monte_carlo_query"] == "raw" and len(probe["mc_raw_rms"]["median"]) == 2
    capsys.readouterr()
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "Monte Carlo query: raw" in text and "exact raw-query prediction" in text and "comparison only" in text
