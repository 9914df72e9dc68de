"""Issue 23 item 2 under AppTest: the bundled deltanet-small beside a pruned version of itself (saved by the core
into a temporary directory, or the Prune page's model of this session) on States & rank and Query noise.

Every number the two columns show is checked against the core run on each model independently: states from
analysis.inspect.states.collect_states on the same token ids, noise figures from the definitions (float64 numpy).
Tolerances: the page's heatmaps hold float32 state metrics averaged in numpy, the reference the same metrics
averaged in torch, so they agree to 1e-5 relative; the Query noise tables print 4 significant digits, so 1e-3.
"""
import json
import shutil

import numpy as np
import pytest
import torch

from analysis.models.model_inputs import model_batch
from analysis.models import load as models
from analysis.inspect.states import collect_states
from helpers.app import one_sentence, start
from ui.shared.keys import ModelKey
from ui.prune.prune_run import recovered_entry
from ui_fixtures import save_pruned_sample
from family_cases.text_lm import tiny_config

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")
SAMPLE = models.SAMPLES_DIR / "deltanet-small"
DIMS = [32, 48, 64, 16]  # per layer: the labels must say dk → dk′ where it changed
TOKENS, SEQUENCES, STRIDE = 32, 2, 8
STATES, NOISE = "pages/states.py", "pages/query_noise.py"


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """deltanet-small pruned by the core (l1, data-free) and saved with its tokenizer: (result, directory)."""
    if not (SAMPLE / "config.json").exists():
        pytest.skip("the bundled sample deltanet-small is not installed")
    return save_pruned_sample(SAMPLE, tmp_path_factory.mktemp("cmp") / "deltanet-small-l1", DIMS)


@pytest.fixture(scope="module")
def recovered(pruned):
    """The pruned model after a real 2-step recovery of its q/k rows, measured on a short test split, as the Prune
    page's recovery job leaves it in the prune run (ui.prune.prune_run.recovered_entry). qk at lr 1e-4: with these tiny
    batches two LoRA steps (lora, lora-kd) do not improve validation, so recovery would keep step 0 (the pruned
    model itself) and the recovered column could not be told from the pruned one."""
    from analysis.shrink.prune_workflow import Evaluation, recover_and_measure
    from analysis.shrink.recovery import RecoverySettings
    result, _ = pruned
    settings = RecoverySettings(method="qk", steps=2, lr=1e-4, batch=2, seq_len=32, eval_every=2, eval_tokens=512)
    done = recover_and_measure(result.model, models.load_tokenizer(result.model), settings,
                               Evaluation("test", 32, 256, latency=False))
    entry = recovered_entry("test-run", done, settings)
    # the recovered weights are those of step 2 (validation improved on the pruned model), so its states differ
    assert entry["recovery"]["kept_step"] == 2, entry["validation"]
    return entry


def reference(model_dir_or_model) -> tuple:
    """(the core's StateTrace, the token ids): a model (or saved folder) on the page's token ids, read from the
    bundled test split through the loaded model's tokenizer, traced every STRIDE tokens with the last 8 keys."""
    original = models.load_model(str(SAMPLE), "cpu", "float32")
    ids = model_batch(original, models.load_tokenizer(original), TOKENS, SEQUENCES, split="test").ids
    model = (models.load_model(str(model_dir_or_model), "cpu", "float32")
             if not hasattr(model_dir_or_model, "forward") else model_dir_or_model)
    trace = collect_states(model, ids, stride=STRIDE, keep_keys=8, tau=1e-3)
    return trace, ids


def chart(at, key: str) -> dict:
    return next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith(f"-{key}"))


def clean(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def open_states(monkeypatch):
    at = start(monkeypatch, "deltanet-small")
    at.switch_page(STATES).run()
    at.number_input(key="w:tokens").set_value(TOKENS).run()
    at.number_input(key="w:sequences").set_value(SEQUENCES).run()
    clean(at)
    return at


def compare_with_directory(at, directory):
    at.selectbox(key="w:compare_with").set_value("directory").run()
    at.text_input(key="w:compare_dir").set_value(str(directory)).run()
    return at


def delta_tables(at) -> list:
    return [f.value for f in at.dataframe if "dk → dk′" in f.value.columns]


def heat(at, key: str) -> np.ndarray:
    return np.array(chart(at, key)["data"][0]["z"], dtype=float)


def test_states_side_by_side_matches_the_core_for_both_models(monkeypatch, pruned):
    result, directory = pruned
    at = compare_with_directory(open_states(monkeypatch), directory)
    clean(at)
    ref_a, _ = reference(SAMPLE)
    ref_b, _ = reference(directory)
    for key, ref in (("rank_heatmap", ref_a), ("rank_heatmap_compare", ref_b)):  # effective rank, the default
        want = ref.metric("effective_rank")[..., -1].double().mean(1).numpy()
        np.testing.assert_allclose(heat(at, key), want, rtol=1e-5, atol=1e-7)
    # issue 29: the Δ map is in directions (Δ effective rank, absolute), not Δ of a ratio whose denominator
    # min(dk′, dv) pruning changed: the very figures of the table's Δ column
    delta = heat(at, "rank_heatmap_delta")
    want = (ref_b.metric("effective_rank")[..., -1].double().mean(1) - ref_a.metric("effective_rank")[..., -1]
            .double().mean(1)).numpy()
    np.testing.assert_allclose(delta, want, rtol=1e-5, atol=1e-5)
    assert (delta[3] < 0).all()  # 16 of 64 channels kept in layer 3: fewer directions there, however u moved
    assert "effective rank" in chart(at, "rank_heatmap_delta")["layout"]["title"]["text"].replace("<br>", " ")
    titles = [chart(at, k)["layout"]["title"]["text"].replace("<br>", " ") for k in ("rank_heatmap",
                                                                                      "rank_heatmap_compare")]
    assert "original: deltanet-small, dk 64" in titles[0] and f"pruned: {directory}" in titles[1]
    assert "dk per layer 32, 48, 64, 16" in titles[1]

    # the per-layer/head table: dk → dk′, effective rank and noise gain of both models, from the definitions
    [table] = delta_tables(at)  # the one difference table on States & rank (the rest are the heads' rank cards)
    assert list(table["dk → dk′"][::4]) == [f"64 → {d}" for d in DIMS]
    for role, ref in (("original", ref_a), ("pruned", ref_b)):
        eff = ref.metric("effective_rank")[..., -1].double().mean(1).numpy().ravel()
        np.testing.assert_allclose(table[f"effective rank: {role}"], eff, rtol=1e-5)
        gains = []
        for layer in ref.layers:
            S, K = layer.final_state.double().numpy(), layer.keys.double().numpy()  # [B,H,dk,dv], [B,H,n,dk]
            fro = np.sqrt((S ** 2).sum((-2, -1)))[:, :, None]                          # [B,H,1]
            readout = np.linalg.norm(np.einsum("bhnk,bhkv->bhnv", K, S), axis=-1)      # ‖Sᵀk‖
            rel = np.linalg.norm(K, axis=-1) / np.sqrt(S.shape[-2]) * fro / readout   # σ‖S‖_F/‖Sᵀk‖ at 0 dB
            gains.append(np.median(np.sqrt((rel ** 2).mean(-1)), axis=0))             # RMS over keys, median
        np.testing.assert_allclose(table[f"noise gain: {role}"], np.concatenate(gains), rtol=1e-4)
    np.testing.assert_allclose(table["Δ effective rank"],
                               table["effective rank: pruned"] - table["effective rank: original"], atol=1e-9)

    # the layer picker names the key dims where they differ; both drill-in columns follow it
    assert at.selectbox(key="w:sel_layer").format_func(3) == "3 (dk 64 → dk′ 16)"
    at.selectbox(key="w:sel_layer").set_value(3).run()
    clean(at)
    for key, ref, dk in (("spectrum_original", ref_a, 64), ("spectrum_other", ref_b, 16)):
        spec = chart(at, key)
        assert f"dk {dk}" in spec["layout"]["title"]["text"].replace("<br>", " ")
        for curve in spec["data"]:  # the positions kept from the sidebar's earlier setting, or the defaults
            at_token = ref.positions.index(int(curve["name"].removeprefix("after token ")))
            want = ref.layers[3].metrics["singular_values"][:, 0, at_token].double().mean(0).numpy()
            np.testing.assert_allclose(np.array(curve["y"], dtype=float), want, rtol=1e-5, atol=1e-9)
        over = chart(at, key.replace("spectrum", "rank_over_positions"))
        mean = next(t for t in over["data"] if t["name"].endswith("(mean)"))
        want = ref.layers[3].metrics["effective_rank"][:, 0].double().mean(0).numpy()   # the default metric
        np.testing.assert_allclose(np.array(mean["y"], dtype=float), want, rtol=1e-5, atol=1e-7)
    assert len(chart(at, "spectrum_other")["data"][0]["y"]) == 16  # min(dk′, dv) singular values
    assert any("device cpu · dtype float32" in c.value and f"{TOKENS} tokens × {SEQUENCES} sequences" in c.value
               for c in at.caption)


def closed_form(at, index: int) -> dict:
    """Sequence 0's row of the `index`-th closed-form table (original, then pruned: the columns in order)."""
    table = [f.value for f in at.dataframe if "κ" in f.value.columns][index]
    return {col: table.loc["sequence 0", col] for col in ("‖S‖² (Frobenius)", "s₁", "κ", "numerical rank")}


def test_query_noise_side_by_side_matches_the_core(monkeypatch, pruned):
    _, directory = pruned
    at = compare_with_directory(open_states(monkeypatch), directory)
    at.selectbox(key="w:sel_layer").set_value(3).run()
    at.switch_page(NOISE).run()
    clean(at)
    assert at.selectbox(key="w:compare_with").value == "directory"  # the choice follows the user across pages
    for index, ref in ((0, reference(SAMPLE)[0]), (1, reference(directory)[0])):
        S = ref.layers[3].final_state[0, 0].double().numpy()   # sequence 0, head 0
        s = np.linalg.svd(S, compute_uv=False)
        rank = int((s > 1e-3 * s[0]).sum())
        got = closed_form(at, index)
        np.testing.assert_allclose(float(got["‖S‖² (Frobenius)"]), (S ** 2).sum(), rtol=1e-3)
        np.testing.assert_allclose(float(got["s₁"]), s[0], rtol=1e-3)
        np.testing.assert_allclose(float(got["κ"]), s[0] / s[rank - 1], rtol=1e-3)
        assert int(got["numerical rank"]) == rank
    subheaders = " ".join(h.value for h in at.subheader)
    assert "(original: deltanet-small, dk 64)" in subheaders and f"(pruned: {directory}, dk′ 16)" in subheaders
    assert not [t for t in chart(at, "noise_vs_snr_other")["data"] if t["mode"] == "markers"]
    at.button(key="noise_mc_run").click().run()  # one click runs the Monte Carlo of both models
    clean(at)
    for key in ("noise_vs_snr", "noise_vs_snr_other"):
        assert [t for t in chart(at, key)["data"] if t["mode"] == "markers"], key
    assert "for both models" in " ".join(c.value for c in at.caption)


def test_rank_utilization_after_every_token_for_both_columns(monkeypatch, pruned):
    """The every-token toggle tracks s₁ for the comparison model too, on the same token ids (core's tracker)."""
    from analysis.inspect.rank_trace import collect_utilization_trace
    _, directory = pruned
    at = compare_with_directory(open_states(monkeypatch), directory)
    at.selectbox(key="w:metric").set_value("rank_utilization").run()   # the toggle belongs to this metric
    at.toggle(key="w:every_token").set_value(True).run()
    clean(at)
    for key, source in (("rank_over_positions_original", SAMPLE), ("rank_over_positions_other", directory)):
        _, ids = reference(SAMPLE)
        model = models.load_model(str(source), "cpu", "float32")
        want = collect_utilization_trace(model, ids)[0]["rank_utilization"][:, 0].double().mean(0).numpy()
        mean = next(t for t in chart(at, key)["data"] if t["name"].endswith("(mean)"))
        assert len(mean["y"]) == TOKENS
        np.testing.assert_allclose(np.array(mean["y"], dtype=float), want, rtol=1e-5, atol=1e-7)


def test_the_prune_pages_model_is_offered_and_compared(monkeypatch, pruned):
    """The Prune page keeps its result in the session (ui.shared.made); the picker offers it only then."""
    result, _ = pruned
    at = open_states(monkeypatch)
    assert at.selectbox(key="w:compare_with").options == ["none", "a saved model directory"]
    at.session_state["pruned"] = {"key": ModelKey(str(SAMPLE), "cpu", "float32"), "id": "test-run", "result": result,
                                  "recovered": None}
    at.run()
    assert "the model pruned on the Prune page" in at.selectbox(key="w:compare_with").options
    at.selectbox(key="w:compare_with").set_value("pruned").run()
    clean(at)
    want = reference(result.model)[0].metric("effective_rank")[..., -1].double().mean(1).numpy()
    np.testing.assert_allclose(heat(at, "rank_heatmap_compare"), want, rtol=1e-5, atol=1e-7)
    title = chart(at, "rank_heatmap_compare")["layout"]["title"]["text"].replace("<br>", " ")
    assert "pruned on the Prune page" in title

    # the Prune page's model now belongs to another loaded model: the choice falls back to none, said once
    at.session_state["pruned"] = {**at.session_state["pruned"], "key": ModelKey("/elsewhere/model", "cpu", "float32")}
    at.run()
    clean(at)
    assert at.selectbox(key="w:compare_with").value == "none"
    [info] = [i.value for i in at.info if "Compare with is back to none" in i.value]
    assert "no pruned version of the loaded model" in info and one_sentence(info), info


def test_a_recovery_finished_while_away_from_the_prune_page_is_offered(monkeypatch, pruned, recovered):
    """The recovery job ended while the user was on States & rank: the picker moves its result into the prune run
    (as the Prune page's table would) and offers it; a recovery of another prune run is not taken."""
    from analysis.shrink.prune_workflow import Evaluation
    from ui.shared.job_runner import Job
    result, _ = pruned
    original = models.load_model(str(SAMPLE), device="cpu")
    before = Evaluation("test", 32, 256, latency=False).measure(original, models.load_tokenizer(original))
    run = {"key": ModelKey(str(SAMPLE), "cpu", "float32"), "id": "test-run", "result": result, "recovered": None,
           "before": before}  # as the Prune page's run holds it: the recovery's point is placed against it
    job = Job("recovery", "settings", "q/k rows: 2 steps")
    job.state, job.result = "done", {**recovered, "for": "another-run"}
    at = open_states(monkeypatch)
    at.session_state["pruned"], at.session_state["bgjob:recovery"] = run, job
    at.run()
    assert "pruned + qk recovery (2 steps)" not in at.selectbox(key="w:compare_with").options and not job.taken
    job.result = recovered  # for "test-run"
    at.run()
    assert "pruned + qk recovery (2 steps)" in at.selectbox(key="w:compare_with").options
    assert job.taken and at.session_state["pruned"]["recovered"] is recovered
    assert "plan_history" not in at.session_state  # Compare only takes it: the Prune page records its point

    # the Prune page, asking for the recovery on each run, records it once in its history of plans
    points = prune_page_history(at.session_state["pruned"])
    assert [(p["source"], p["label"]) for p in points] == [("recovered", "recovery 1 (2 steps)")], points


def prune_page_history(run: dict) -> list[dict]:
    """The history of plans after the Prune page's take_recovery ran twice (two reruns) for `run`."""
    from streamlit.testing.v1 import AppTest

    def script():
        import streamlit as st
        from ui.prune import prune_run
        for _ in range(2):
            prune_run.take_recovery(st.session_state["pruned"])
    at = AppTest.from_function(script)
    at.session_state["pruned"] = run
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return [p for held in at.session_state["plan_history"].values() for p in held.values()]


def final_headline(model) -> np.ndarray:
    """The core's effective rank (the map's default) of `model`'s final states on the page's ids, mean over
    sequences: [L, H]."""
    return reference(model)[0].metric("effective_rank")[..., -1].double().mean(1).numpy()


def test_the_recovered_model_is_offered_and_compared_apart_from_the_pruned_one(monkeypatch, pruned, recovered):
    """After a recovery on the Prune page the picker offers the recovered model, labelled by method and steps; its
    column shows the recovered model's states (not the pruned model's: each has its own cache identity) and says
    "recovered" wherever the plain pruned one says "pruned". Tolerance 1e-5 relative, as above: the page averages
    float32 state metrics in numpy, the reference the same metrics in torch."""
    result, _ = pruned
    run = {"key": ModelKey(str(SAMPLE), "cpu", "float32"), "id": "test-run", "result": result, "recovered": None}
    at = open_states(monkeypatch)
    at.session_state["pruned"] = run
    at.run()
    assert at.selectbox(key="w:compare_with").options == [
        "none", "the model pruned on the Prune page", "a saved model directory"]  # no recovery yet: not offered
    at.session_state["pruned"] = {**run, "recovered": recovered}
    at.run()
    assert at.selectbox(key="w:compare_with").options == [
        "none", "the model pruned on the Prune page", "pruned + qk recovery (2 steps)", "a saved model directory"]

    want_recovered, want_pruned = final_headline(recovered["model"]), final_headline(result.model)
    # the two models' states differ by more than the tolerance, so a column showing the pruned one fails below
    assert not np.allclose(want_recovered, want_pruned, rtol=1e-5, atol=1e-7)
    at.selectbox(key="w:compare_with").set_value("pruned").run()  # the pruned model's states are computed first
    clean(at)
    np.testing.assert_allclose(heat(at, "rank_heatmap_compare"), want_pruned, rtol=1e-5, atol=1e-7)
    at.selectbox(key="w:compare_with").set_value("recovered").run()
    clean(at)
    np.testing.assert_allclose(heat(at, "rank_heatmap_compare"), want_recovered, rtol=1e-5, atol=1e-7)
    title = chart(at, "rank_heatmap_compare")["layout"]["title"]["text"].replace("<br>", " ")
    assert "recovered: deltanet-small pruned and recovered on the Prune page" in title
    assert "qk recovery (2 steps)" in title and "dk per layer 32, 48, 64, 16" in title
    [frame] = delta_tables(at)
    eff = reference(recovered["model"])[0].metric("effective_rank")[..., -1].double().mean(1).numpy().ravel()
    np.testing.assert_allclose(frame["effective rank: recovered"], eff, rtol=1e-5)
    assert not [c for c in frame.columns if "pruned" in c]
    captions = " ".join(c.value for c in at.caption)
    assert "Δ = recovered − original" in captions and "(recovered, dk per layer 32, 48, 64, 16)" in captions
    assert "recovered − original" in chart(at, "rank_heatmap_delta")["layout"]["title"]["text"]
    saved = models.load_model(str(pruned[1]), "cpu", "float32").state_dict()  # the pruned weights, as saved
    assert recovered["model"] is not result.model and all(  # recovery made a new model and left the pruned one
        torch.equal(w, saved[n]) for n, w in result.model.state_dict().items())  # stored bits: exact, no math

    # a new Prune replaces the run (no recovery yet): the remembered choice falls back to none, said once
    at.session_state["pruned"] = {**run, "id": "test-run-2"}
    at.run()
    clean(at)
    assert at.selectbox(key="w:compare_with").value == "none"
    [info] = [i.value for i in at.info if "recovered model" in i.value]
    assert "belonged to an earlier prune" in info and one_sentence(info), info
    assert not [c for c in at.get("plotly_chart") if "rank_heatmap_compare" in c.proto.id]
    at.run()
    assert not [i for i in at.info if "recovered model" in i.value]  # said once, on the run that fell back


def test_a_model_beside_itself_is_a_comparison_with_zero_difference(monkeypatch):
    """Same key dims: labelled "comparison", never "pruned"; the same model on the same ids differs by exactly 0."""
    at = compare_with_directory(open_states(monkeypatch), SAMPLE)
    clean(at)
    assert "(comparison: deltanet-small, dk 64)" in chart(at, "rank_heatmap_compare")["layout"]["title"]["text"] \
        .replace("<br>", " ")
    assert not heat(at, "rank_heatmap_delta").any()
    [frame] = delta_tables(at)
    assert (frame["Δ effective rank"] == 0).all() and (frame["Δ noise gain"] == 0).all()


def vocab_swapped_copy(directory, out):
    """The pruned model with a tokenizer of the same size whose ids 300 and 301 swap tokens."""
    shutil.copytree(directory, out)
    tok = json.loads((out / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = [k for k, v in vocab.items() if v in (300, 301)]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out


def other_vocabulary(out):
    from transformers import AutoModelForCausalLM
    config = json.loads((SAMPLE / "config.json").read_text())
    shape = {k: config[k] for k in ("hidden_size", "num_hidden_layers", "num_heads")}
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(tiny_config("delta_net", **shape, vocab_size=4096)).save_pretrained(out)
    return out


def test_bad_comparison_directories_are_one_sentence_and_the_page_keeps_working(monkeypatch, pruned, tmp_path):
    _, directory = pruned
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("not a model")
    cases = {
        str(tmp_path / "missing"): "is not a directory",
        str(tmp_path / "file.txt"): "is not a directory",
        str(tmp_path / "empty"): "has no config.json",
        str(models.SAMPLES_DIR / "gated-deltanet-small"): "Gated DeltaNet model and deltanet-small a DeltaNet",
        str(other_vocabulary(tmp_path / "vocab4096")): "vocabulary of 4,096 tokens",
        str(vocab_swapped_copy(directory, tmp_path / "swapped")): "different tokenizer",
    }
    at = open_states(monkeypatch)
    for text, expected in cases.items():
        compare_with_directory(at, text)
        assert not at.exception, [e.value for e in at.exception]
        [error] = at.error
        assert expected in error.value and one_sentence(error.value), error.value
        assert chart(at, "rank_heatmap")["data"][0]["z"]  # the page goes on without a comparison
        assert not [c for c in at.get("plotly_chart") if "rank_heatmap_compare" in c.proto.id]
    at.switch_page(NOISE).run()  # the same picker, the same sentence, and Query noise goes on with one column
    assert not at.exception, [e.value for e in at.exception]
    [error] = at.error
    assert "different tokenizer" in error.value and one_sentence(error.value), error.value
    assert chart(at, "noise_vs_snr") and not [c for c in at.get("plotly_chart") if "noise_vs_snr_other" in c.proto.id]
