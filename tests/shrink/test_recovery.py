"""Issue 22: recovery by q/k rows, LoRA, or LoRA + distillation (peft), validation-best keeping, stop/resume,
and a merged model that loads without peft, for every family (tiny random-init models on real text)."""
from __future__ import annotations

import copy
from dataclasses import replace
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from analysis.data import corpus as data
from analysis.runtime.cancel import Cancelled
from analysis.errors import AnalysisError
from analysis.shrink.prune import prune
from analysis.models.key_plan import plan_key_dims
from analysis.io.model_dir import save_model
from analysis.shrink.recovery import RecoverySettings, kd_loss, recover, step_loss
from family_cases.text_lm import build_tiny
from family_cases import CASE_MODULES

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[2]
TINY = dict(batch=2, seq_len=32, eval_every=3, eval_tokens=128, rank=4)


@pytest.fixture(scope="module")
def tok():
    return data.load_tokenizer()


@pytest.fixture(scope="module")
def pair():
    """(unpruned, pruned) tiny Gated DeltaNet, L1 at ratio 0.5."""
    model = build_tiny("gated_deltanet")
    return model, prune(model, "l1", plan_key_dims(model, ratio=0.5), None).model


def _ids(seed=0, batch=2, tokens=32):
    return torch.randint(0, 8192, (batch, tokens), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("method", ["lora", "lora-kd", "qk"])
def test_zero_steps_returns_the_pruned_model_exactly(pair, tok, method):
    """LoRA's B starts at zero, so merging untrained adapters adds exactly nothing (and qk trains nothing)."""
    model, pruned = pair
    out = recover(pruned, tok, RecoverySettings(method=method, steps=0, **TINY), teacher=model)
    want, got = pruned.state_dict(), out.model.state_dict()
    assert sorted(want) == sorted(got)
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert out.kept_step == 0 and [v["step"] for v in out.validation] == [0]


def test_kd_term_is_zero_when_the_student_is_the_teacher(pair):
    model, _ = pair
    s = RecoverySettings(method="lora-kd", temperature=2.0, kd_weight=1.0)
    with torch.no_grad():
        losses = step_loss(model, _ids(), s, teacher=model)
        ce = step_loss(model, _ids(), RecoverySettings(method="lora"))["ce"]
    assert abs(float(losses["kd"])) < 1e-6
    assert abs(float(losses["loss"]) - float(ce)) < 1e-6  # total = CE alone


def test_kd_loss_matches_torch_kl_div():
    """An independent reference: torch's kl_div (log-target form), summed over the vocabulary, times T²."""
    gen = torch.Generator().manual_seed(1)
    s, t = torch.randn(2, 5, 11, generator=gen), torch.randn(2, 5, 11, generator=gen)
    T = 2.0
    ref = torch.nn.functional.kl_div(torch.log_softmax(s / T, -1), torch.log_softmax(t / T, -1), log_target=True,
                                     reduction="none").sum(-1).mean() * T * T
    assert abs(float(kd_loss(s, t, T)) - float(ref)) < 1e-6  # float32 sums of 11 terms: far below 1e-6 apart


def test_validation_best_never_returns_a_worse_model(pair, tok):
    """On a trained model (the bundled gated-deltanet-small), a learning rate that wrecks it (Adam moves every
    q/k weight by about lr): every check is worse, so step 0 (the pruned model itself) is kept, exactly."""
    from analysis.models.load import load_model
    trained = load_model(str(ROOT / "sample_models" / "gated-deltanet-small"), device="cpu")
    pruned_trained = prune(trained, "l1", plan_key_dims(trained, ratio=0.5), None).model
    out = recover(pruned_trained, tok, RecoverySettings(method="qk", steps=2, lr=1.0, **{**TINY, "eval_every": 1}))
    assert [v["step"] for v in out.validation] == [0, 1, 2]
    assert all(v["perplexity"] > out.validation[0]["perplexity"] for v in out.validation[1:]), out.validation
    assert out.kept_step == 0
    want = pruned_trained.state_dict()
    assert all(torch.equal(want[k], v) for k, v in out.model.state_dict().items())
    model, pruned = pair
    good = recover(pruned, tok, RecoverySettings(method="lora-kd", steps=3, lr=1e-3, **{**TINY, "eval_every": 1}),
                   teacher=model)
    kept = good.metadata()
    assert kept["kept_validation_perplexity"] <= kept["start_validation_perplexity"]
    # the returned (merged) model measures what was kept: merge is a float re-association, so 1e-4 relative
    from analysis.evaluate.perplexity import perplexity
    again = perplexity(good.model, tok, "validation", context=32, max_tokens=128)["perplexity"]
    assert abs(again / kept["kept_validation_perplexity"] - 1) < 1e-4


class StopAfterStep:
    """A cancel token that turns True once training step `n` has reported (the token is also checked inside a
    step, at every block of the forward, so counting its calls would not count steps)."""

    def __init__(self, n):
        self.n, self.done = n, 0

    def heard(self, event):
        if event["kind"] == "train":
            self.done = event["step"]

    def __call__(self):
        return self.done >= self.n


class After:
    def __init__(self, n):
        self.n, self.calls = n, 0

    def __call__(self):
        self.calls += 1
        return self.calls > self.n

    def stop_after(self, cancel=None):
        """In place of analysis.runtime.cancel.check: a Ctrl-C after n checks."""
        if self():
            raise Cancelled()


def test_a_stopped_recovery_resumes_from_its_saved_step(pair, tok, tmp_path):
    model, pruned = pair
    s = RecoverySettings(method="lora-kd", steps=4, lr=1e-3, **{**TINY, "eval_every": 2})
    whole = recover(pruned, tok, s, teacher=model)
    state = tmp_path / "state"
    with pytest.raises(Cancelled):
        stop = StopAfterStep(2)
        recover(pruned, tok, s, teacher=model, cancel=stop, progress=stop.heard, state_dir=state)  # steps 1, 2 run
    saved = json.loads((state / "recovery.json").read_text())
    assert saved["step"] == 2 and len(saved["history"]) == 2 and (state / "recovery_weights.safetensors").is_file()
    with pytest.raises(AnalysisError, match="resume it or discard it"):
        recover(pruned, tok, s, teacher=model, state_dir=state)
    with pytest.raises(AnalysisError, match="other settings"):
        recover(pruned, tok, RecoverySettings(**{**s.__dict__, "rank": 8}), teacher=model, state_dir=state,
                resume=True)
    resumed = recover(pruned, tok, s, teacher=model, state_dir=state, resume=True)
    assert resumed.resumed_from == 2 and [h["step"] for h in resumed.history] == [1, 2, 3, 4]
    # the same batches, weights and AdamW moments: the resumed run retraces the whole one (fp32 CPU, same ops;
    # 1e-5 leaves room for a different thread split of the reductions)
    for a, b in zip(whole.history, resumed.history):
        assert abs(a["loss"] - b["loss"]) < 1e-5, (a, b)
    assert not state.exists()  # finished: the stopped state is gone
    with pytest.raises(Cancelled):
        stop = StopAfterStep(1)
        recover(pruned, tok, s, teacher=model, cancel=stop, progress=stop.heard, state_dir=state)
    fresh = recover(pruned, tok, s, teacher=model, state_dir=state, resume=False)  # discarded: starts over
    assert fresh.resumed_from is None and len(fresh.history) == 4


def _family_model(module: str):
    try:
        case = importlib.import_module(f"family_cases.{module}").CASE
    except ModuleNotFoundError:
        pytest.skip(f"no case module family_cases/{module}.py")
    model = copy.deepcopy(case.make_model())
    if model.config.vocab_size < 8192:
        model.resize_token_embeddings(8192, mean_resizing=False)  # the bundled tokenizer's text fits
    return model


LOADER = """
import sys, json
import analysis
analysis.ready()
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
out = {}
for path in sys.argv[1:]:
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True).eval()
    ref = load_file(path + "/../" + path.rsplit("/", 1)[1] + ".logits.safetensors")
    with torch.no_grad():
        got = model(ref["ids"], use_cache=False).logits
    out[path] = float((got - ref["logits"]).abs().max())
print(json.dumps({"diffs": out, "peft_imported": "peft" in sys.modules}))
"""


@pytest.mark.parametrize("module", CASE_MODULES)
def test_every_method_runs_and_the_saved_model_loads_without_peft(module, tok, tmp_path):
    """3 steps of each method per family; the merged model is saved as the CLI saves it and reloaded in a fresh
    process with transformers alone (analysis.ready(), no peft), giving the same logits."""
    from safetensors.torch import save_file
    model = _family_model(module)
    pruned = prune(model, "l1", plan_key_dims(model, ratio=0.5), None).model
    ids = _ids(tokens=16)
    paths = []
    for method in ("qk", "lora", "lora-kd"):
        out = recover(pruned, tok, RecoverySettings(method=method, steps=3, lr=1e-3, **TINY), teacher=model)
        assert len(out.history) == 3 and all(torch.isfinite(torch.tensor(h["loss"])) for h in out.history)
        assert (out.history[0]["kd"] is not None) == (method == "lora-kd")
        assert type(out.model) is type(pruned)  # merged: the plain class, no peft wrapper
        assert out.model.config.to_dict().get("readout_key_dims") == pruned.config.to_dict().get("readout_key_dims")
        path = tmp_path / method
        save_model(out.model, path, tokenizer=tok, metadata={"recovery": out.metadata()})
        with torch.no_grad():
            logits = out.model(ids, use_cache=False).logits
        save_file({"ids": ids, "logits": logits.contiguous()}, str(tmp_path / f"{method}.logits.safetensors"))
        assert json.loads((path / "pruning.json").read_text())["recovery"]["method"] == method
        paths.append(str(path))
    done = subprocess.run([sys.executable, "-c", LOADER, *paths], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["peft_imported"]
    # the same weights and ops on the same CPU: float32 rounding only
    assert all(d < 1e-4 for d in report["diffs"].values()), report


def test_lora_targets_name_each_family_s_projections():
    from analysis.archs import adapter_for
    from analysis.shrink.recovery_setup import lora_target_modules
    expect = {"delta_net": {"q_proj", "k_proj", "v_proj"}, "gated_deltanet": {"q_proj", "k_proj", "v_proj"},
              "kda": {"q_proj", "k_proj", "v_proj"}, "kimi_linear": {"q_proj", "k_proj", "v_proj"},
              "qwen3_5": {"in_proj_qkv"}, "mamba2": {"in_proj"}, "gla": {"q_proj", "k_proj", "v_proj"},
              "rwkv7": {"r_proj", "k_proj", "v_proj"}}
    for module in CASE_MODULES:
        model = _family_model(module)
        family = adapter_for(model).family
        names = {n.rsplit(".", 1)[1] for n in lora_target_modules(model)}
        assert names == expect[family], (module, names)


def test_bad_settings_are_one_sentence(pair):
    from analysis.shrink.recovery import check_settings
    model, pruned = pair
    cases = [(dict(method="lora", rank=0), "outside 1 … "), (dict(method="lora", rank=10**6), "outside 1 … "),
             (dict(temperature=0.0), "temperature T must be positive"), (dict(kd_weight=-1.0), "zero or positive"),
             (dict(method="nope"), "Unknown recovery method"),
             (dict(lr=-1.0), "learning rate must be a positive number")]
    for kwargs, message in cases:
        with pytest.raises(AnalysisError, match=message):
            check_settings(pruned, RecoverySettings(**kwargs), teacher=model)
    with pytest.raises(AnalysisError, match="distils from the unpruned model"):
        check_settings(pruned, RecoverySettings(method="lora-kd"), teacher=None)


def test_a_family_without_lora_targets_is_one_sentence(pair, monkeypatch):
    from analysis.archs import adapter_for
    from analysis.shrink.recovery import check_settings
    model, pruned = pair
    adapter = adapter_for(pruned)
    monkeypatch.setattr(adapter, "spec", replace(adapter.spec, lora_projections=()))
    with pytest.raises(AnalysisError, match="names no q/k/v projections for LoRA; use --recover-method qk"):
        check_settings(pruned, RecoverySettings(method="lora"), teacher=model)
    check_settings(pruned, RecoverySettings(method="qk"))  # qk needs none


# ---- the CLI: settings in, settings out, bad input before any work -------------------------------------------

def _cli(argv, capsys):
    from analysis.cli.main import main
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


PRUNE = ["prune", "{model}", "--strategy", "l1", "--ratio", "0.5", "--eval-tokens", "300", "--out", "{out}"]


@pytest.mark.parametrize("extra, message", [
    (["--recover-rank", "0"], "--recover-rank must be at least 1"),
    (["--recover-rank", "100000"], "LoRA rank 100000 is outside 1 … "),
    (["--kd-temperature", "0"], "--kd-temperature must be positive"),
    (["--kd-weight", "-1"], "--kd-weight must be zero or positive"),
    (["--recover-resume"], "act on --recover-state"),
], ids=["rank 0", "rank too large", "T 0", "negative weight", "resume without state"])
def test_cli_bad_recovery_settings_are_one_sentence_before_any_work(extra, message, tiny_dirs, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [a.format(model=tiny_dirs["gated_deltanet"], out=out) for a in PRUNE] + ["--recover-steps", "2", *extra]
    code, stdout, err = _cli(argv, capsys)
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_cli_saved_state_needs_resume_or_discard(tiny_dirs, tmp_path, capsys, monkeypatch):
    import analysis.shrink.recovery as recovery
    state = tmp_path / "state"
    argv = [a.format(model=tiny_dirs["gated_deltanet"], out=tmp_path / "out") for a in PRUNE]
    tiny = ["--recover-steps", "2", "--recover-method", "qk", "--recover-batch", "1", "--recover-seq-len", "16",
            "--recover-eval-tokens", "32", "--recover-state", state]
    with monkeypatch.context() as m:  # Ctrl-C after the first step: the state is saved
        m.setattr(recovery, "check", After(1).stop_after)
        code, _, err = _cli(argv + tiny, capsys)
    assert code == 2 and "its state is saved in" in err and (state / "recovery.json").is_file(), err
    code, _, err = _cli(argv + tiny, capsys)
    assert code == 2 and "add --recover-resume to continue it or --recover-discard" in err, err


def test_cli_lora_kd_recovery_writes_its_settings(tiny_dirs, tmp_path, capsys):
    out, js = tmp_path / "out", tmp_path / "prune.json"
    argv = [a.format(model=tiny_dirs["gated_deltanet"], out=out) for a in PRUNE]
    code, stdout, err = _cli(argv + ["--recover-steps", "2", "--recover-method", "lora-kd", "--recover-rank", "4",
                                     "--recover-alpha", "8", "--recover-lr", "1e-3", "--recover-batch", "2",
                                     "--recover-seq-len", "32", "--kd-temperature", "3", "--kd-weight", "0.5",
                                     "--recover-eval-every", "1", "--recover-eval-tokens", "64", "--json", js], capsys)
    assert code == 0, err
    rec = json.loads(js.read_text())["recovery"]
    assert {k: rec[k] for k in ("method", "rank", "alpha", "lr", "steps", "temperature", "kd_weight")} == \
        {"method": "lora-kd", "rank": 4, "alpha": 8.0, "lr": 1e-3, "steps": 2, "temperature": 3.0, "kd_weight": 0.5}
    assert rec["kept_step"] in (0, 1, 2) and rec["kept_validation_perplexity"] <= rec["start_validation_perplexity"]
    saved = json.loads((out / "pruning.json").read_text())
    assert saved["recovery"] == rec and saved["readout_key_dims"]  # pure channel removal's readout rule kept
    assert "lora-kd recovery steps (kept step" in stdout


def test_discard_never_removes_a_folder_this_tool_did_not_write(tmp_path):
    """`--recover-discard` / resume=False on a user's own folder holding a file named like our record: refused,
    nothing removed (only a state this project wrote, marked, is ever deleted)."""
    from analysis.io.recovery_state import RECORD, discard_state, has_state
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / RECORD).write_text("{}")
    (folder / "thesis.tex").write_text("precious")
    assert has_state(folder)
    with pytest.raises(AnalysisError, match="was not written by this tool .*, so it was left alone"):
        discard_state(folder)
    assert (folder / "thesis.tex").read_text() == "precious"


@pytest.mark.parametrize("method", ["qk", "lora-kd"])
def test_a_head_pruned_model_recovers_and_keeps_its_heads(tok, method, tmp_path):
    """Issue 32: whole heads removed (with key channels too) recover like any prune; the merged model keeps the
    per-layer head counts and loads back to the same logits."""
    from transformers import AutoModelForCausalLM

    from analysis.models.load import describe
    from analysis.shrink.heads.prune import HeadPlan, plan_head_counts, prune_with_heads
    model = build_tiny("gated_deltanet")
    pruned = prune_with_heads(model, "l1", plan_key_dims(model, ratio=0.5),
                              HeadPlan("random", tuple(plan_head_counts(model, ratio=0.5)))).model
    heads = describe(pruned).value_heads_per_layer
    assert heads != describe(model).value_heads_per_layer
    out = recover(pruned, tok, RecoverySettings(method=method, steps=2, lr=1e-3, **TINY), teacher=model)
    assert len(out.history) == 2 and all(torch.isfinite(torch.tensor(h["loss"])) for h in out.history)
    assert describe(out.model).value_heads_per_layer == heads
    ids = _ids(tokens=16)
    loaded = AutoModelForCausalLM.from_pretrained(save_model(out.model, tmp_path / "r", tokenizer=tok)).eval()
    with torch.no_grad():   # the same weights and ops on the same CPU: float32 rounding only
        assert (loaded(ids).logits - out.model(ids, use_cache=False).logits).abs().max() < 1e-4
