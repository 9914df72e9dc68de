"""Layer-sensitivity map: prune ONE layer at a time at each ratio (all other layers intact) and measure the loss.

For a language model the loss of a point is Δ log perplexity (nats per scored token, additive over
layers under the allocator's model); for a recall-trained model it is the drop in recall accuracy.
Points come from a generator through the one point cache (`analysis.io.point_cache`), so a map
is resumable and a rerun is instant. Each layer also carries its rank utilization (final state of the
calibration sequences, mean over sequences and heads) and its fp32 state bytes per sequence.

By default the map is measured on the validation split (recall: sequences of a seed apart from the
test seed), so an allocation chosen from it is judged on test data it never saw.
"""
from __future__ import annotations

import hashlib
import json
import math
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from analysis.shrink.calibration import CalibrationSettings, calibrate
from analysis.runtime.cancel import check
from analysis.defaults import SENSITIVITY_EVAL_TOKENS, SENSITIVITY_RATIOS
from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.io.points import IN_PROCESS, Executor, Point, run_points
from analysis.io.point_identity import model_identity
from analysis.evaluate.perplexity import paired_difference  # noqa: F401  (re-exported: the map's paired SE)
from analysis.models.channel_group import fp32_state_bytes
from analysis.models.load import REPO_ROOT, describe, linear_layers
from analysis.models.prefix import PrefixCache
from analysis.shrink.prune_workflow import Evaluation, prune_then_measure
from analysis.models.key_plan import key_dims, plan_key_dims
from analysis.data.recall import RecallTask, recall_batch
from analysis.shrink.strategies import get_strategy

METRICS = ("ppl", "recall")
RESULTS_DIR = REPO_ROOT / "sample_models" / "results"
MAP_RECALL_SEED = 4321  # recall sequences the map is measured on (recall_report's test seed is 1234)
DEFAULT_RATIOS, DEFAULT_EVAL_TOKENS = SENSITIVITY_RATIOS, SENSITIVITY_EVAL_TOKENS  # in analysis.defaults
MAX_EVAL_TOKENS = 1_000_000
MAX_RECALL_SEQUENCES = 16_384
PROFILE_SEQUENCES = 4  # rank utilization of the final state: the first calibration sequences suffice
# what a cached map point must hold, typed, to be served from the cache (analysis.io.point_cache checks it)
BASE_FIELDS = {"layer": point_cache.OPTIONAL_INT, "ratio": point_cache.NUMBER, "value": point_cache.NUMBER,
               "head_k_dims": point_cache.INT_LIST}
POINT_FIELDS = {**BASE_FIELDS, "layer": point_cache.INT, "head_k_dim": point_cache.INT, "loss": point_cache.NUMBER}
PPL_FIELDS = {"perplexity": point_cache.NUMBER, "tokens": point_cache.INT, "stride": point_cache.INT,
              "dataset": point_cache.TEXT}


@dataclass(frozen=True)
class MapSettings:
    strategy: str
    ratios: tuple[float, ...]
    metric: str = "ppl"               # "ppl" (Δ log perplexity) or "recall" (drop in recall accuracy)
    split: str = "validation"
    context: int = 256
    eval_tokens: int = DEFAULT_EVAL_TOKENS
    calib_sequences: int = 16
    calib_tokens: int | None = 256
    seed: int = 0
    recall_pairs: int | None = None   # recall metric: stored pairs per sequence (default: the trained count)
    recall_sequences: int = 256

    def __post_init__(self):
        """Settings the metric ignores take one fixed value, so equal maps have equal settings (and cache keys)."""
        ignored = ({"split": "validation", "context": 256, "eval_tokens": DEFAULT_EVAL_TOKENS, "calib_tokens": None}
                   if self.metric == "recall" else {"recall_pairs": None, "recall_sequences": 256})
        for name, value in ignored.items():  # recall: sequence length fixed by the task
            object.__setattr__(self, name, value)
        object.__setattr__(self, "ratios", tuple(float(r) for r in self.ratios))

    def as_dict(self) -> dict:
        return {**asdict(self), "ratios": list(self.ratios)}

    @property
    def calibration(self) -> CalibrationSettings:
        return CalibrationSettings(self.calib_sequences, self.calib_tokens, self.seed)


def recall_task(model) -> RecallTask | None:
    """The recall task a model was trained on, or None for a language model."""
    path = Path(getattr(model, "analysis_source", "") or "") / "training.json"
    if not path.is_file():
        return None
    try:
        if json.loads(path.read_text()).get("task") != "recall":
            return None
    except (OSError, json.JSONDecodeError):
        return None
    from analysis.data.recall import task_of
    return task_of(model)


def check_settings(model, s: MapSettings, task: RecallTask | None) -> None:
    """Every bad setting as one sentence, before any work starts."""
    get_strategy(s.strategy)
    if s.metric not in METRICS:
        raise AnalysisError(f"Unknown metric {s.metric!r}; use ppl (perplexity) or recall (recall accuracy).")
    if s.metric == "recall" and task is None:
        raise AnalysisError("The recall metric needs a recall-trained model (such as deltanet-recall); "
                            "use --metric ppl for a language model.")
    if s.metric == "ppl" and task is not None:
        raise AnalysisError("This recall-trained model has no text tokenizer, so perplexity means nothing for it; "
                            "use --metric recall.")
    if not s.ratios:
        raise AnalysisError("Give at least one pruning ratio for the map, e.g. 0.25,0.5,0.75.")
    if any(not 0 < r < 1 for r in s.ratios):
        raise AnalysisError(f"Map ratios must lie strictly between 0 and 1, got {list(s.ratios)}.")
    if not 1 <= s.eval_tokens <= MAX_EVAL_TOKENS:
        raise AnalysisError(f"Evaluation tokens must be between 1 and {MAX_EVAL_TOKENS:,}, got {s.eval_tokens}.")
    if not 1 <= s.recall_sequences <= MAX_RECALL_SEQUENCES:
        raise AnalysisError(f"Recall sequences must be between 1 and {MAX_RECALL_SEQUENCES:,}, "
                            f"got {s.recall_sequences}.")
    if task is not None and s.recall_pairs is not None and not 1 <= s.recall_pairs <= task.n_keys:
        raise AnalysisError(f"Recall pairs must be between 1 and the task's {task.n_keys} keys, got {s.recall_pairs}.")
    from analysis.shrink.calibration import check_size
    check_size(model, s.calib_sequences, s.calib_tokens or 256)  # the profile draws them even for l1/random
    for r in s.ratios:  # every ratio must leave at least one channel in every layer
        for layer in range(len(key_dims(model))):
            plan_key_dims(model, ratios=[r if i == layer else 0.0 for i in range(len(key_dims(model)))])


def check_time(model, s: MapSettings, task: RecallTask | None, yes: bool = False, say=None) -> None:
    """The whole map's time (every point measured as its metric measures), refused past an hour unless `yes`."""
    from analysis.models import workload
    if s.metric == "recall" and task is not None:
        part = (-(-s.recall_sequences // 64), min(64, s.recall_sequences), 2 * 2 * (s.recall_pairs or task.n_pairs), 1.0)
    else:
        part = (-(-workload.windows(s.eval_tokens + 1, s.context, s.context) // 8), 8, s.context, 1.0)
    points = 1 + len(key_dims(model)) * len(s.ratios)
    workload.check_points("The sensitivity map", points, model, [part], "use fewer ratios or tokens per point",
                          yes, say)


def layer_profile(model, input_ids: torch.Tensor) -> list[dict]:
    """Per layer: key dim, heads, value dim, fp32 state bytes per sequence and rank utilization of the final state."""
    from analysis.inspect.states import collect_states
    trace = collect_states(model, input_ids, positions=[input_ids.shape[1] - 1])
    rows = []
    for layer, (info, lt) in enumerate(zip(linear_layers(model), trace.layers)):
        u = lt.metrics["rank_utilization"].double()
        u = u[torch.isfinite(u)]
        rows.append({"layer": layer, "head_k_dim": info.key_dim, "heads": info.value_heads, "value_dim": info.value_dim,
                     "state_bytes": fp32_state_bytes(info.value_heads, info.key_dim, info.value_dim),
                     "rank_utilization": float(u.mean()) if u.numel() else None})
    return rows


class MapMeasure:
    """The map's quality measurement: perplexity of the split's first tokens, or recall accuracy (`evaluation`:
    as the workflows' one Evaluation), read as the map's value."""

    def __init__(self, tokenizer, s: MapSettings, task: RecallTask | None, cancel=None):
        self.tokenizer, self.s, self.cancel = tokenizer, s, cancel
        self.scored = None  # tokens the last perplexity scored (fewer than asked when the split is shorter)
        self.task = None if task is None else RecallTask(task.n_keys, task.n_values, s.recall_pairs or task.n_pairs,
                                                         s.recall_pairs or task.n_pairs)

    def evaluation(self, per_window: bool = False) -> Evaluation:
        """per_window (perplexity only) keeps each window's mean log-loss, for paired comparisons."""
        if self.task is not None:
            return Evaluation(recall_pairs=(self.task.n_pairs,), recall_sequences=self.s.recall_sequences,
                              latency=False, recall_seed=MAP_RECALL_SEED)
        return Evaluation(self.s.split, self.s.context, self.s.eval_tokens, latency=False, per_window=per_window)

    def read(self, got: dict) -> dict:
        """The map's value of one measure() dict (and with per-window losses, `windows`)."""
        if self.task is not None:
            acc = got["recall"]["by_pairs"][0]["accuracy"]
            return {"value": acc, "recall_accuracy": acc}
        ppl = got["perplexity"]
        self.scored = ppl["tokens"]
        out = {"value": ppl["perplexity"], "perplexity": ppl["perplexity"], "dataset": ppl["dataset"],
               "tokens": ppl["tokens"], "stride": ppl["stride"]}
        if "window_losses" in ppl:
            out["windows"] = ppl["window_losses"]
        return out

    def __call__(self, model, per_window: bool = False) -> dict:
        return self.read(self.evaluation(per_window).measure(model, self.tokenizer, cancel=self.cancel))

    def loss(self, value: float, base: float) -> float:
        """Additive loss: Δ log perplexity (nats/token), or the drop in recall accuracy."""
        return math.log(value / base) if self.task is None else base - value

    def label(self, scored: int | None = None) -> str:
        """What was measured; `scored` (default: what the last call scored) names the tokens actually used."""
        if self.task is not None:
            return (f"recall accuracy, {self.task.n_pairs} pairs, {self.s.recall_sequences} synthetic sequences "
                    f"(seed {MAP_RECALL_SEED})")
        from analysis.data.corpus import dataset_label
        scored = self.scored if scored is None else scored
        tokens = f"first {self.s.eval_tokens:,} tokens"
        if scored is not None and scored < self.s.eval_tokens:
            tokens = f"the whole split ({scored:,} tokens scored; {self.s.eval_tokens:,} asked)"
        return f"perplexity, {dataset_label(self.s.split)}, {tokens}, context {self.s.context}"


def calibration_for(model, tokenizer, s: MapSettings, task: RecallTask | None, cancel=None):
    """Train-split windows (recall models: synthetic sequences of the calibration seed, as long as the task's,
    which is what the dashboard's shared calibration draws too; a recall map's settings carry no calib_tokens)."""
    tokens = task.seq_len if task is not None else s.calib_tokens
    return calibrate(model, tokenizer, s.calib_sequences, tokens, s.seed, cancel=cancel)


def sensitivity_points(model, tokenizer, s: MapSettings, task: RecallTask | None = None, use_cache: bool = True,
                       get_calibration=None, cancel=None, yes: bool = False, say=None,
                       executor: Executor = IN_PROCESS):
    """Yield the unpruned baseline, then one point per (ratio, layer): that layer pruned alone at that ratio.

    get_calibration: a zero-argument callable returning the calibration (called only when a point is
    computed, not served from the cache); by default `calibration_for` with the map's settings.
    cancel (analysis.runtime.cancel): checked inside every point; a cancelled point is not cached.
    executor (analysis.io.points): in-process, the points come in order; on Ray, the cached ones first, then
    each as its task finishes (the same cache entries either way).
    In-process, every point computed here starts its forward at its pruned layer on the unpruned model's kept
    hidden states (analysis.models.prefix: exact, in memory up to a quarter of the memory budget, recomputed past
    it; a streamed model's on disk, reading only the blocks from the pruned layer on); a Ray worker runs each
    point whole. Over eight parameters: `s` is what is measured, the rest how.
    """
    check_settings(model, s, task)
    executor.connect()  # an unreachable cluster is one sentence before anything is written
    point_cache.check_writable()  # an unwritable cache is one sentence before the first point, not after it
    check_time(model, s, task, yes, say)
    param = next(model.parameters())
    device = str(param.device)
    base_key = {"kind": "sensitivity", "model": model_identity(model), "device": device, "dtype": str(param.dtype),
                **{k: v for k, v in s.as_dict().items() if k not in ("strategy", "ratios")}}
    measured = PPL_FIELDS if task is None else {"recall_accuracy": point_cache.NUMBER}
    run = dict(executor=executor, device=device, use_cache=use_cache, cancel=cancel)
    # in-process every point reads the same tokens: each starts at its pruned layer (analysis.models.prefix, exact)
    prefix = None if executor.on_ray else PrefixCache(model, fill_on_miss=True)
    try:
        yield from _map_points(model, tokenizer, s, task, get_calibration, cancel, base_key, measured, run, prefix)
    finally:
        if prefix is not None:
            prefix.close()  # a streamed model's kept layer inputs leave the disk with the map


def _map_points(model, tokenizer, s, task, get_calibration, cancel, base_key, measured, run, prefix):
    unpruned = Point({**base_key, "point": "unpruned"}, {**BASE_FIELDS, **measured}, {"layer": None, "ratio": 0.0})
    baseline = next(run_points(_map_baseline, [unpruned], lambda _: (model, tokenizer, s, task, prefix), **run))[1]
    yield baseline
    n_layers = len(key_dims(model))
    points = [Point({**base_key, "strategy": s.strategy, "ratio": ratio, "layer": layer}, {**POINT_FIELDS, **measured},
                    {"layer": layer, "ratio": ratio}, (layer, ratio)) for ratio in s.ratios for layer in range(n_layers)]

    def shared(_todo):
        calib = None
        if get_strategy(s.strategy).needs_calibration:
            calib = get_calibration() if get_calibration else calibration_for(model, tokenizer, s, task, cancel)
        return model, tokenizer, s, task, calib, baseline, prefix
    for _, point in run_points(_map_point, points, shared, **run):
        yield point


def _map_baseline(model, tokenizer, s: MapSettings, task, prefix: PrefixCache | None, cancel=None) -> dict:
    """The map's unpruned point (in-process or on a Ray worker); in-process it fills the prefix cache."""
    with prefix.active() if prefix is not None else nullcontext():
        return {"layer": None, "ratio": 0.0, "head_k_dims": key_dims(model),
                **MapMeasure(tokenizer, s, task, cancel)(model, per_window=True)}


def _map_point(model, tokenizer, s: MapSettings, task, calib, baseline: dict, prefix: PrefixCache | None, layer: int,
               ratio: float, cancel=None) -> dict:
    """One map cell: `layer` pruned alone at `ratio`, measured as the baseline was (in-process or on a Ray worker)."""
    measure = MapMeasure(tokenizer, s, task, cancel)
    n_layers = len(key_dims(model))
    dims = plan_key_dims(model, ratios=[ratio if i == layer else 0.0 for i in range(n_layers)])
    run = prune_then_measure(model, tokenizer, s.strategy, dims, calib, measure.evaluation(per_window=True),
                             seed=s.seed, cancel=cancel, prefix=prefix)
    out = measure.read(run.measured)
    paired = out.pop("windows", None), baseline.get("windows")
    # the paired standard error of Δ (same windows, both models) tells a cell's signal from noise
    se = ({"se": paired_difference(*paired[::-1])["se"]}
          if all(paired) and len(paired[0]) == len(paired[1]) > 1 else {})  # one window: no spread
    return {"layer": layer, "ratio": ratio, "head_k_dim": dims[layer], "head_k_dims": dims, **out,
            "loss": measure.loss(out["value"], baseline["value"]), **se}


def build_map(model, s: MapSettings, profile: list[dict], points: list[dict], task: RecallTask | None = None,
              name: str | None = None, identity: str | None = None) -> dict:
    """The map as JSON-ready data: settings, strategy, per-layer profile and every finished point. `identity`: the
    model's point-cache identity when the caller already holds it (hashing every weight costs a page rerun ~0.1 s)."""
    info = describe(model)
    measure = MapMeasure(None, s, task)
    base = next((p for p in points if p.get("layer") is None), None)
    cells = [{k: p[k] for k in ("layer", "ratio", "head_k_dim", "value", "loss", "se") if k in p} for p in points
             if p.get("layer") is not None]
    return {"kind": "sensitivity-map", "model": name or getattr(model, "analysis_name", None),
            "model_identity": identity or model_identity(model), "model_type": info.model_type, "strategy": s.strategy,
            "metric": s.metric, "measure": measure.label(None if base is None else base.get("tokens")),
            "role": "map: the map and everything predicted from it (analysis.data.roles); never the figure reported",
            "loss": "delta log perplexity (nats per token)" if s.metric == "ppl" else "drop in recall accuracy",
            "settings": s.as_dict(), "device": info.device, "dtype": info.dtype,
            "baseline": None if base is None else base["value"], "layers": profile, "points": cells,
            "complete": len(cells) == len(s.ratios) * info.layers}


def same_weights(smap: dict, model) -> bool:
    """Was `smap` measured on this model's weights and config? By the point cache's model identity; a map
    written before maps carried it names its weights by the sha256 of the safetensors files (still read)."""
    if "model_identity" in smap:
        return smap["model_identity"] == model_identity(model)
    return smap.get("weights_sha256") is not None and smap.get("weights_sha256") == _legacy_file_digest(model)


def _legacy_file_digest(model) -> str | None:
    """sha256 of the safetensors files the model was loaded from, as maps written before model_identity name it."""
    source = getattr(model, "analysis_source", None)
    files = sorted(Path(source).glob("*.safetensors")) if source and Path(source).is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def compute_map(model, tokenizer, s: MapSettings, task: RecallTask | None = None, use_cache: bool = True,
                on_point=None, yes: bool = False, say=None, *, profile: list[dict] | None = None,
                get_calibration=None, cancel=None, lock=None, name: str | None = None,
                executor: Executor = IN_PROCESS) -> dict:
    """The sensitivity-map workflow (CLI `sensitivity` and the Prune page's map job): the rank profile, then
    every point (cached), calling on_point(point) as each finishes; returns `build_map`'s JSON-ready map.

    profile: the rank profile when the caller already holds it (the dashboard's one memoized profile, measured
    on the same `profile_inputs`); get_calibration / cancel: as `sensitivity_points`; lock: a context manager
    held while each step computes (the dashboard's compute lock; other sessions run between points);
    executor: where the points run (analysis.io.points; the profile runs here). Over eight parameters because
    `s` (MapSettings) is all the map measures; the rest is how it runs and what the caller already holds.
    """
    lock = lock if lock is not None else nullcontext()
    check_settings(model, s, task)  # before the profile draws its calibration sequences
    check_time(model, s, task, yes, say)
    executor.connect()  # before the profile: an unreachable cluster is one sentence, at once
    if profile is None:
        with lock:
            profile = layer_profile(model, profile_inputs(model, tokenizer, s, task))
    points = []
    gen = sensitivity_points(model, tokenizer, s, task, use_cache, get_calibration=get_calibration, cancel=cancel,
                             yes=True, executor=executor)  # estimated above
    while True:
        with lock:
            point = next(gen, None)
        if point is None:
            break
        points.append(point)
        if on_point:
            on_point(point)
    order = {r: i for i, r in enumerate(s.ratios)}  # Ray's finishing order → ratio by ratio, layer by layer
    points.sort(key=lambda p: (-1, -1) if p["layer"] is None else (order[p["ratio"]], p["layer"]))
    return build_map(model, s, profile, points, task, name)


def profile_inputs(model, tokenizer, s: MapSettings, task: RecallTask | None) -> torch.Tensor:
    """The sequences the rank utilization is measured on: the first few calibration sequences."""
    return calibration_profile_ids(tokenizer, s.calibration, task)


def calibration_profile_ids(tokenizer, c: CalibrationSettings, task: RecallTask | None) -> torch.Tensor:
    """The first PROFILE_SEQUENCES calibration sequences (train split, or synthetic recall sequences)."""
    from analysis.data import corpus as data
    n = min(c.sequences, PROFILE_SEQUENCES)
    if task is None:
        return data.calibration_batches(tokenizer, c.sequences, c.tokens, seed=c.seed)[:n]
    return recall_batch(task, c.sequences, torch.Generator().manual_seed(c.seed))[0][:n]


def profile_label(c: CalibrationSettings, task: RecallTask | None) -> str:
    """What the one rank profile was measured on: said wherever it is shown."""
    where = "train-split sequences" if task is None else "synthetic recall sequences"
    return (f"rank utilization u of the final state, mean over heads, on the first "
            f"{min(c.sequences, PROFILE_SEQUENCES)} calibration {where} ({c.tokens} tokens, seed {c.seed})")


def shipped_map_path(name: str, strategy: str) -> Path:
    return RESULTS_DIR / f"sensitivity-{name}-{strategy}.json"


def shipped_strategies(name: str) -> list[str]:
    """The strategies whose map ships for the bundled sample `name` (sample_models/results/), sorted."""
    prefix = f"sensitivity-{name}-"
    return sorted(p.stem.removeprefix(prefix) for p in RESULTS_DIR.glob(f"{prefix}*.json")
                  if "-" not in p.stem.removeprefix(prefix))


def load_shipped(model, name: str, s: MapSettings) -> dict | None:
    """The bundled map for this model and these exact settings, or None (different weights or settings)."""
    path = shipped_map_path(name, s.strategy)
    if not path.exists():
        return None
    try:
        smap = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    info = describe(model)
    same = (smap.get("settings") == s.as_dict() and same_weights(smap, model)
            and smap.get("device") == info.device and smap.get("dtype") == info.dtype)
    return smap if same else None


@dataclass
class MapGrid:
    """The map as a layers × ratios table of losses (None where not measured yet)."""
    ratios: list[float]
    losses: list[list[float | None]]
    values: list[list[float | None]]
    dims: list[list[int | None]] = field(default_factory=list)
    ses: list[list[float | None]] = field(default_factory=list)  # paired standard error of each loss, if known


def grid(smap: dict) -> MapGrid:
    ratios = list(smap["settings"]["ratios"])
    n = len(smap["layers"])
    losses = [[None] * len(ratios) for _ in range(n)]
    values = [[None] * len(ratios) for _ in range(n)]
    dims = [[None] * len(ratios) for _ in range(n)]
    ses = [[None] * len(ratios) for _ in range(n)]
    for p in smap["points"]:
        if p["ratio"] in ratios:
            j = ratios.index(p["ratio"])
            losses[p["layer"]][j], values[p["layer"]][j], dims[p["layer"]][j] = p["loss"], p["value"], p["head_k_dim"]
            ses[p["layer"]][j] = p.get("se")
    return MapGrid(ratios, losses, values, dims, ses)
