"""The heads study: state-rank stratification on several inputs, its stability, and (optionally) what each head
costs when removed alone. One workflow for `python -m analysis heads` and the dashboard (States & rank's head
groups, Channel importance's Heads view), so both show the same groups and numbers.

Inputs ("texts"): a bundled split (`test`: Shakespeare, `wiki`: the Wikipedia slice, ...), `random-ids` (uniform
random token ids of the model's vocabulary, seeded: an input unlike any training text), a text file, or for a recall model
`recall` (its own recall sequences; each `recall` entry draws with its own seed, so three entries are three inputs).
Each text is read as `sequences` consecutive windows of `tokens` tokens (analysis.models.model_inputs.model_batch).

The removal cost (`measure`): each value head removed alone (analysis.shrink.heads.sensitivity), Δ mean next-token
loss in nats per token (= Δ log perplexity for text windows) with its paired standard error over the windows of
the validation split (recall models: recall sequences of seed 4321), `measure` windows of `tokens` tokens.
"""
from __future__ import annotations

import hashlib

import torch

from analysis.data import inputs
from analysis.io import point_cache
from analysis.io.point_identity import model_identity
from analysis.io.points import IN_PROCESS, Executor, Point, run_points
from analysis.models.model_inputs import model_batch
from analysis.defaults import RANDOM_IDS
from analysis.data.corpus import SPLITS
from analysis.errors import AnalysisError
from analysis.inspect.head_ranks import head_trajectories, notice, stratification
from analysis.inspect.report import number, numbers
from analysis.models.load import linear_layers

MAP_RECALL_SEED = 4321   # as the layer-sensitivity map: sequences apart from the test seed
REMOVAL_FIELDS = {"layer": point_cache.INT, "head": point_cache.INT, "delta": point_cache.NUMBER,
                  "sequences": point_cache.INT}


def default_texts(model) -> list[str]:
    """Three inputs: Shakespeare test, the Wikipedia slice and random token ids; a recall model: two draws of its
    own recall sequences and random token ids."""
    from analysis.defaults import HEAD_TEXTS
    return ["recall", "recall", RANDOM_IDS] if inputs.recall_task(model) is not None else list(HEAD_TEXTS)


def check_texts(model, texts: list[str]) -> None:
    """One sentence for a text list the model cannot read, before any work."""
    task = inputs.recall_task(model)
    if len(texts) < 2:
        raise AnalysisError(f"Stability needs at least two inputs, got {len(texts)}; give e.g. --texts "
                            f"test,wiki,{RANDOM_IDS}.")
    for text in texts:
        if text == "recall" and task is None:
            raise AnalysisError("`recall` names a recall model's own sequences, and this is a language model; use "
                                f"bundled splits (test, wiki, ...), {RANDOM_IDS}, or a text file.")
        if task is not None and text not in ("recall", RANDOM_IDS):
            raise AnalysisError(f"{getattr(model, 'analysis_name', 'This model')} is a recall model without a "
                                f"tokenizer, so it cannot read {text!r}; use recall (its own sequences) or "
                                f"{RANDOM_IDS}.")
        if task is None and text not in (*SPLITS, RANDOM_IDS) and not _is_file(text):
            raise AnalysisError(f"Unknown input {text!r}: give a bundled split ({', '.join(SPLITS)}), {RANDOM_IDS}, "
                                "or the path of a text file.")


def _is_file(text: str) -> bool:
    from pathlib import Path
    return Path(text).expanduser().is_file()


def text_batch(model, tokenizer, text: str, index: int, tokens: int, sequences: int, seed: int):
    """(ids, label) of one named input."""
    if text == RANDOM_IDS:
        gen = torch.Generator().manual_seed(seed + 1000 * index)
        length = inputs.recall_task(model).seq_len if inputs.recall_task(model) is not None else tokens
        return (torch.randint(0, model.config.vocab_size, (sequences, length), generator=gen),
                f"uniform random token ids (seed {seed + 1000 * index})")
    if text == "recall":
        batch = model_batch(model, None, tokens, sequences, seed=seed + index)
    else:
        split, path = (text, None) if text in SPLITS else (None, text)
        batch = model_batch(model, tokenizer, tokens, sequences, split=split, text_file=path)
    return batch.ids, batch.label


def heads_study(model, tokenizer, texts: list[str] | None = None, tokens: int = 256, sequences: int = 4,
                seed: int = 0, measure: int = 0, progress=None, cancel=None, executor: Executor = IN_PROCESS) -> dict:
    """The stratification report (per layer and head: trajectories, group per text, stability) and, with
    `measure` > 0, the removal cost of every head (its points in-process or on Ray: `executor`). texts: None for
    default_texts. progress(fraction, text)."""
    texts = default_texts(model) if texts is None else texts
    check_texts(model, texts)
    say = progress or (lambda _f, _t: None)
    traces, labels = [], []
    steps = len(texts) + (1 if measure else 0)
    for i, text in enumerate(texts):
        ids, label = text_batch(model, tokenizer, text, i, tokens, sequences, seed)
        say(i / steps, f"states of every head on {label}")
        traces.append(head_trajectories(model, ids))
        labels.append(label)
    groups = stratification(traces)
    removal = None
    if measure:
        say(len(texts) / steps, "each head removed alone")
        removal, removal_label = measure_removal(model, tokenizer, tokens, measure, cancel=cancel, executor=executor,
                                                 progress=lambda d, n: say((len(texts) + d / n) / steps,
                                                                          f"each head removed alone: {d}/{n}"))
    layers = []
    for info, row in zip(linear_layers(model), groups):
        group = info.value_heads // info.key_heads
        heads = []
        for h in range(info.value_heads):
            per_text = [{"text": t, "group": split["labels"][h],
                         "mean_log_effective_rank_late": number(trace["layers"][info.index]["summary"][h]),
                         "effective_rank_final": number(trace["layers"][info.index]["effective_rank"][h, -1]),
                         "numerical_rank_final": number(trace["layers"][info.index]["numerical_rank"][h, -1]),
                         "mean_log_fro_norm_late": number(trace["layers"][info.index]["late_log_fro"][h])}
                        for t, trace, split in zip(labels, traces, row["splits"])]
            entry = {"head": h, "key_head": h // group, "group": row["majority"][h],
                     "same_on_all_texts": row["same_on_all"][h], "texts": per_text}
            if removal is not None:
                entry["removal"] = removal[info.index][h]
            heads.append(entry)
        layers.append({"layer": info.index, "block": info.block, "key_heads": info.key_heads,
                       "value_heads": info.value_heads, "agreement": row["agreement"], "kappa": row["kappa"],
                       "splits": [{"text": t, **{k: (number(v) if isinstance(v, float) else v) for k, v in s.items()
                                                 if k != "labels"}} for t, s in zip(labels, row["splits"])],
                       "heads": heads})
    out = {"texts": labels, "tokens": tokens, "sequences": sequences, "seed": seed,
           "metric": "effective rank (Roy–Vetterli) of each value head's state, mean over the sequences",
           "summary": "mean of log max(erank, 1) over the traced positions in the second half of the sequence",
           "split_rule": "largest gap between the sorted head summaries of a layer (low below, high above)",
           "stability": "agreement: heads labelled alike on every text; kappa: mean pairwise Cohen's κ",
           "positions": traces[0]["positions"],
           "trajectories": [[numbers(layer["effective_rank"]) for layer in trace["layers"]] for trace in traces],
           "layers": layers, "notice": notice(groups, len(texts))}
    if removal is not None:
        out["removal"] = {"what": "Δ mean next-token loss (nats per token; = Δ log perplexity on text windows) with "
                                  "the head's output zeroed (equal to removing it), paired SE over the windows",
                          "data": removal_label}
    return out


def measure_removal(model, tokenizer, tokens: int, windows: int, cancel=None, progress=None,
                    executor: Executor = IN_PROCESS, use_cache: bool = True):
    """(per layer, per head {delta, se, sequences}; what was read) on the validation split or recall sequences.

    Each head's removal is one point of the point executor (analysis.io.points): cached under the model, the exact
    token ids and the head, run in-process or as Ray tasks. progress(done, total) as each head's point arrives."""
    from analysis.shrink.heads.sensitivity import head_removal_point, sequence_losses_point
    task = inputs.recall_task(model)
    batch = model_batch(model, None if task is not None else tokenizer, tokens, windows,
                        split=None if task is not None else "validation", seed=MAP_RECALL_SEED)
    executor.connect()  # an unreachable cluster is one sentence before anything is written
    if use_cache:
        point_cache.check_writable()
    param = next(model.parameters())
    ids = batch.ids.contiguous()
    key = {"kind": "head-removal", "model": model_identity(model), "device": str(param.device),
           "dtype": str(param.dtype), "data": batch.label, "shape": list(ids.shape),
           "ids": hashlib.sha256(ids.numpy().tobytes()).hexdigest()}
    run = dict(executor=executor, device=str(param.device), use_cache=use_cache, cancel=cancel)
    base = next(run_points(sequence_losses_point, [Point({**key, "point": "unpruned"},
                                                         {"losses": point_cache.NUMBER_LIST})],
                           lambda _: (model, ids), **run))[1]
    layers = linear_layers(model)
    points = [Point({**key, "layer": layer.index, "head": h}, REMOVAL_FIELDS, {"layer": layer.index, "head": h},
                    (layer.index, h)) for layer in layers for h in range(layer.value_heads)]
    out = [[None] * layer.value_heads for layer in layers]
    for done, (i, got) in enumerate(run_points(head_removal_point, points, lambda _: (model, ids, base["losses"]),
                                               **run), 1):
        layer, h = points[i].args
        out[[x.index for x in layers].index(layer)][h] = {k: got[k] for k in ("head", "delta", "se", "sequences")}
        if progress:
            progress(done, len(points))
    return out, batch.label


def report_with_heads(model, tokenizer, settings, progress=None) -> dict:
    """The offline report's numbers (analysis.runs.report_data.build_report) plus the heads study's split and
    stability, on the report's own sequence size (settings.tokens × settings.batch on each default input)."""
    from analysis.runs.report_data import build_report
    say = progress or (lambda _f, _s: None)
    report = build_report(model, tokenizer, settings, progress=lambda f, step: say(0.85 * f, step))
    study = heads_study(model, tokenizer, None, settings.tokens, settings.batch, settings.seed,
                        progress=lambda f, step: say(0.85 + 0.15 * f, f"head groups: {step}"))
    report["heads"] = {k: v for k, v in study.items() if k != "trajectories"}
    say(1.0, "report measured")
    return report
