"""The dashboard's caches over the core: which one holds what, and why (docs/dashboard.md, "Caches").

- Streamlit's `st.cache_resource`: the objects every session shares: the loaded models (`shared_model`,
  `random_init_model`), tokenizers, and ui.shared.memo's stores.
- Streamlit's `st.cache_data`: quick results computed in a script run (`resolve`, `noise_bounds`,
  `noise_predictions`); Streamlit copies each value out, so a caller cannot change what is stored.
- ui.shared.memo, the one in-process memo of our own: long results that show named-step progress the first time or
  run in a job's thread (state collections, calibration, the Query-noise Monte-Carlo and recall steps); neither is
  possible inside an st cache. Its values are shared and read-only.
- On disk, analysis.io.point_cache: sweep and sensitivity points, which cost minutes each, outlive the server and
  are shared with the CLI; each entry proves itself before it is believed.

The model returned by `shared_model` is ONE object for every session of this server process: it is NEVER mutated.
Code that changes weights (pruning, fine-tuning) builds a new model (or `copy.deepcopy`s it first) and keeps it in
its own session. Forward hooks are a mutation too: every forward pass on a shared model (state collection registers
hooks, recall noise injects through hooks) runs under `compute_lock`, so two sessions never interleave their hooks
on the same modules (and GPU timings stay meaningful). `compute_lock` is the compute slot of ui.shared.scheduler:
interactive work first, long jobs pausing between windows and points only while no hook is in place (its docstring
has the rules). Computed results are plain numpy arrays / lists / dicts keyed
by (ModelKey, InputSpec, settings); revisiting a page only looks them up.
"""
from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from analysis.errors import AnalysisError
from analysis.models import budget, load as models
from analysis.linalg import noise
from analysis.inspect import noise_report
from analysis.linalg.rank import METRIC_INFO
from analysis.data.recall import RecallTask
from analysis.evaluate.recall_noise import recall_accuracy_at
from analysis.inspect.states import collect_states
from ui.shared import batches, memo, scales
from ui.shared.scheduler import SCHEDULER, Scheduler
from ui.shared import progress as progress_ui
from ui.shared.keys import InputSpec, ModelKey

REAL_KEYS = 8  # real keys per head kept from the end of each sequence for the noise Monte Carlo


def compute_lock() -> Scheduler:
    """The process's compute slot around forward passes on shared models (`with compute_lock():`; re-entrant:
    cached calls nest). A module object, not an st cache: "Clear caches" must never hand out a second slot while
    the first is held."""
    return SCHEDULER


@st.cache_data(max_entries=8, show_spinner=False)
def model_identity(key: ModelKey) -> str:
    """The point cache's identity of the shared model (analysis.io.point_identity): its weights never change, so
    every weight is hashed once per model, not on each rerun of a page that draws a map."""
    from analysis.io.point_identity import model_identity as identity
    return identity(shared_model(key))


@st.cache_data(ttl=60, show_spinner=False)
def resolve(source: str, device: str, dtype: str, max_memory: int | None = None) -> ModelKey:
    """Validate a user's model choice into a ModelKey (cached briefly: hub ids would hit the network)."""
    path = models.resolve_source(source)
    dev = models.resolve_device(device)
    dt = models.resolve_dtype(None if dtype == "auto" else dtype, dev)
    return ModelKey(str(path), dev.type if dev.index is None else str(dev), str(dt).replace("torch.", ""), max_memory)


@st.cache_resource(max_entries=4, show_spinner=False)
def shared_model(key: ModelKey):
    """The loaded model for `key`, shared by all sessions. Read-only: deepcopy before changing anything. Over the
    key's memory budget it is a streamed model (analysis.models.stream), read one block at a time."""
    with compute_lock(), budget.budget_scope(key.max_memory):
        return SCHEDULER.guard(models.load_model(key.path, key.device, key.dtype))


@st.cache_resource(max_entries=2, show_spinner=False)
def random_init_model(key: ModelKey):
    """Same config as `shared_model(key)`, random init with seed 0 (global RNG left untouched). Read-only."""
    from transformers import AutoModelForCausalLM
    if getattr(shared_model(key), "streamed", False):
        raise AnalysisError("The random-init comparison builds a second copy of the whole model, and this one is over "
                            "the memory budget (it is read one block at a time); raise Max memory in the sidebar to "
                            "compare with random init.")
    config = shared_model(key).config
    with compute_lock(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    return SCHEDULER.guard(model.to(device=key.device, dtype=getattr(torch, key.dtype)).eval())


@st.cache_resource(max_entries=4, show_spinner=False)
def tokenizer(path: str):
    return models.load_tokenizer(path)


def recall_task(key: ModelKey) -> RecallTask | None:
    return batches.recall_task_for(key.path)


def _input_ids(key: ModelKey, spec: InputSpec) -> tuple[torch.Tensor, str]:
    task = recall_task(key)
    tok = None if task is not None else tokenizer(key.path)
    return batches.token_batch(shared_model(key), tok, spec, task)


@memo.memoized("trace_data", max_entries=16)
def trace_data(key: ModelKey, spec: InputSpec, stride: int, random_init: bool = False, *,
               progress: progress_ui.Report) -> dict:
    """Metrics every `stride` tokens (+ the last), final states and the last real keys, as numpy arrays.

    metrics[name]: [L, B, H, P]; singular_values, final_states, keys: one array per layer (key dims may
    differ per layer) of shapes [B, H, P, m], [B, H, dk, dv], [B, H, n, dk]. Computed once per process
    (ui.shared.memo: shared, read-only), reporting its steps to `progress` the first time.
    """
    progress(0.0, "loading the random-init copy (seed 0)" if random_init else "tokenizing the inputs")
    model = random_init_model(key) if random_init else shared_model(key)
    return _trace(key, model, *_input_ids(key, spec), stride, progress)


@memo.memoized("compare_trace_data", max_entries=8)
def compare_trace_data(key: ModelKey, spec: InputSpec, stride: int, compare: str, *, _model=None,
                       progress: progress_ui.Report) -> dict:
    """As trace_data, for the comparison model `_model` (identified by `compare`: its cache identity) on exactly
    the token ids the loaded model `key` reads, so both columns of a side-by-side see the same text."""
    progress(0.0, "tokenizing the inputs")
    return _trace(key, _model, *_input_ids(key, spec), stride, progress)


def _trace(key: ModelKey, model, ids: torch.Tensor, label: str, stride: int, progress: progress_ui.Report) -> dict:
    """The trace of `model` on `ids`; `key`: the loaded model, whose tokenizer names the tokens."""
    with compute_lock(), progress_ui.per_layer(model, progress, "recurrence, then the singular values of every kept state"):
        trace = collect_states(model, ids, stride=stride, keep_keys=min(REAL_KEYS, ids.shape[1]), tau=scales.TAU)
    return {
        "positions": list(trace.positions),
        "metrics": {k: trace.metric(k).float().numpy() for k in METRIC_INFO},
        "singular_values": [layer.metrics["singular_values"].float().numpy() for layer in trace.layers],
        "final_states": [layer.final_state.float().numpy() for layer in trace.layers],
        "keys": [layer.keys.float().numpy() for layer in trace.layers],
        "dataset": label, "tokens": int(ids.shape[1]), "sequences": int(ids.shape[0]),
        "token_text": _token_text(key, ids),
    }


def _token_text(key: ModelKey, ids: torch.Tensor) -> list[list[str]] | None:
    """Each token as text, [B][T] (hover labels over token positions); None for recall models (no tokenizer)."""
    if recall_task(key) is not None:
        return None
    tok = tokenizer(key.path)
    return [[tok.decode([i]) for i in row] for row in ids.tolist()]  # " cat", not the byte-level "Ġcat"


@memo.memoized("every_token_data", max_entries=16)
def every_token_data(key: ModelKey, spec: InputSpec, random_init: bool = False, *,
                     progress: progress_ui.Report) -> dict:
    """Rank utilization after every token, [L, B, H, T], with s1 tracked instead of an SVD per state."""
    progress(0.0, "loading the tracker (numba compiles it on first use in this process)")
    ids, _ = _input_ids(key, spec)
    return _every_token(random_init_model(key) if random_init else shared_model(key), ids, progress)


@memo.memoized("compare_every_token_data", max_entries=8)
def compare_every_token_data(key: ModelKey, spec: InputSpec, compare: str, *, _model=None,
                             progress: progress_ui.Report) -> dict:
    """As every_token_data, for the comparison model `_model` on the loaded model's token ids."""
    progress(0.0, "loading the tracker (numba compiles it on first use in this process)")
    return _every_token(_model, _input_ids(key, spec)[0], progress)


def _every_token(model, ids: torch.Tensor, progress: progress_ui.Report) -> dict:
    from analysis.inspect.rank_trace import collect_utilization_trace  # loads numba: only when first asked for
    with compute_lock(), progress_ui.per_layer(model, progress, "tracking s₁ of the state after every token"):
        layers = collect_utilization_trace(model, ids)
    how = "s₁ by an SVD of each state" if all(layer.get("exact") for layer in layers) else "s₁ tracked"
    return {"rank_utilization": np.stack([layer["rank_utilization"].numpy() for layer in layers]), "how": how}


def head_inputs(key: ModelKey, spec: InputSpec, stride: int, layer: int, head: int, compare: str = "", model=None):
    """One head's final states and last real keys: of the loaded model, or (`compare` set) of the comparison
    model `model` on the same inputs (resolve them in a script run: the trace is a memo whose store is an st cache)."""
    trace = compare_trace_data(key, spec, stride, compare, _model=model) if compare else trace_data(key, spec, stride)
    S = torch.from_numpy(trace["final_states"][layer][:, head])            # [B, dk, dv]
    keys = torch.from_numpy(trace["keys"][layer][:, head])                 # [B, n, dk]
    return S, keys


def _probe_keys(S: torch.Tensor, keys: torch.Tensor, probe: int | None) -> torch.Tensor:
    """A probe's keys [B, n, dk]: singular direction `probe` (0-based) or, for None, the last real keys."""
    return keys if probe is None else noise.singular_direction_keys(S, [probe])


def probe_name(probe: int | None, n_keys: int) -> str:
    return f"real keys (last {n_keys})" if probe is None else f"direction {probe + 1}"


@st.cache_data(max_entries=32, show_spinner=False)
def noise_bounds(key: ModelKey, spec: InputSpec, stride: int, layer: int, head: int, compare: str = "",
                 _model=None) -> dict:
    """The closed-form figures per sequence (instant) and the singular directions within every sequence's
    numerical rank (1-based), with the sentence that says why the others are not offered."""
    S, keys = head_inputs(key, spec, stride, layer, head, compare, _model)
    ranks = noise.analytic_noise(S, tau=noise_report.TAU)["numerical_rank"]
    candidates = range(min(8, *S.shape[-2:]))
    offered, skipped = noise_report.directions_within_rank(ranks, candidates)
    return {"table": noise_report.state_table(S, n_directions=len(candidates)), "offered": [j + 1 for j in offered], "skipped": skipped,
            "n_keys": int(keys.shape[1]), "sequences": int(S.shape[0])}


@st.cache_data(max_entries=32, show_spinner=False)
def noise_predictions(key: ModelKey, spec: InputSpec, stride: int, layer: int, head: int, snr_db: tuple,
                      probes: tuple, compare: str = "", _model=None) -> dict:
    """Per-sequence analytic predictions (lists) per probe (0-based direction, None: the real keys)."""
    S, keys = head_inputs(key, spec, stride, layer, head, compare, _model)
    out = {}
    for probe in probes:
        per_seq = noise_report.predictions(S, _probe_keys(S, keys, probe), list(snr_db))
        out[probe] = {k: v.tolist() for k, v in per_seq.items()}
    return out


@memo.memoized("noise_mc_step", max_entries=256)
def noise_mc_step(key: ModelKey, spec: InputSpec, stride: int, layer: int, head: int, snr_db: tuple,
                  probe: int | None, n_samples: int, renormalize: bool, compare: str = "", *, _inputs=None,
                  progress: progress_ui.Report, cancel=None) -> dict:
    """One Monte-Carlo step (one probe, raw or re-normalised query): per-sequence RMS and mean, seed 0. `_inputs`:
    the head's (final states, real keys) from `head_inputs`, resolved in the script run (a job's thread runs it)."""
    S, keys = _inputs
    mc = noise_report.monte_carlo(S, _probe_keys(S, keys, probe), list(snr_db), n_samples, renormalize, seed=0,
                                  cancel=cancel)
    return {k: v.tolist() for k, v in mc.items()}


def noise_summary(name: str, snr_db, pred: dict, mc_raw: dict | None = None, mc_renorm: dict | None = None) -> dict:
    """Median [IQR] summary of one probe (analysis.inspect.noise_report.summarize_probe) from the cached lists."""
    as_tensors = lambda d: None if d is None else {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}
    return noise_report.summarize_probe(name, list(snr_db), as_tensors(pred), as_tensors(mc_raw), as_tensors(mc_renorm))


@memo.memoized("recall_noise_point", max_entries=128)
def recall_noise_point(key: ModelKey, task: RecallTask, snr_db: float | None, n_sequences: int, *, _model=None,
                       _lock=None, progress: progress_ui.Report, cancel=None) -> dict:
    """Recall accuracy at one SNR (None: clean) of the shared model `_model` (`shared_model(key)`) under its lock
    `_lock` (`compute_lock()`), both resolved in the script run (a job's thread runs it); one progress step."""
    with _lock:
        return recall_accuracy_at(_model, task, snr_db, n_sequences=n_sequences, cancel=cancel)
