"""Downstream accuracy the way the field measures it: lm-evaluation-harness (`lm_eval.simple_evaluate`) on the
model and tokenizer this project loaded or pruned.

The harness gets an `HFLM` built on the already-loaded model (every family, every `pruned_*` type, CPU or GPU);
nothing is loaded twice. The subclass here only watches: before the first forward of each request type it bounds
memory and time like every other command (analysis.models.limits / workload), it reports progress, and it checks
the cancel token before every batch, so Stop or Ctrl-C ends an evaluation within a batch. The numbers are the
harness's own (a test compares them with `lm_eval`'s `hf` model loading the same directory).

A recall model (no tokenizer) reads the associative-recall tasks through analysis.data.recall_text's word
tokenizer, whose ids are its own. The harness gets a copy of the tokenizer (it may set a pad token) and never
changes the model. As always, `simple_evaluate` seeds Python's, numpy's and torch's global generators; the
project's own random choices use explicit generators or seeds.
"""
from __future__ import annotations

import copy
import logging
import math
import os
import sys
from dataclasses import dataclass, field

from analysis.errors import AnalysisError
from analysis.evaluate import harness_tasks, task_yaml
from analysis.runtime.cancel import check

HEADLINE = ("acc", "acc_norm", "exact_match")   # the accuracy a chart shows for a task, first one present
DEFAULT_BATCH = 8
BOOTSTRAP_ITERS = 100_000                       # the harness's default (only non-mean metrics bootstrap)


@dataclass(frozen=True)
class TaskSettings:
    """What to evaluate and how, as lm-eval's CLI takes it (hashable: a cache key of the dashboard)."""
    tasks: tuple[str, ...]
    limit: int | None = None          # first N docs of each task
    num_fewshot: int | None = None    # None: each task's own default (0 for the local tasks)
    batch_size: int = DEFAULT_BATCH
    include_path: str | None = None
    bootstrap_iters: int = BOOTSTRAP_ITERS
    allow_task_code: bool = False     # run the `!function` Python files of the include path's task YAMLs

    def __post_init__(self):
        if not self.tasks or any(not str(t).strip() for t in self.tasks):
            raise AnalysisError("Name at least one task (comma-separated, e.g. --tasks shakespeare_next_line).")
        if self.limit is not None and self.limit < 1:
            raise AnalysisError(f"The limit is the number of docs per task, at least 1, not {self.limit}.")
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise AnalysisError(f"The few-shot count must be 0 or more, not {self.num_fewshot}.")
        if self.batch_size < 1:
            raise AnalysisError(f"The batch size must be at least 1, not {self.batch_size}.")

    def record(self) -> dict:
        return {"tasks": list(self.tasks), "limit": self.limit, "num_fewshot": self.num_fewshot,
                "batch_size": self.batch_size, "include_path": self.include_path,
                "bootstrap_iters": self.bootstrap_iters}


@dataclass
class TaskPlan:
    """Tasks loaded once (data read, names checked) for one or many evaluations (a sweep's points)."""
    settings: TaskSettings
    manager: object                    # lm_eval.tasks.TaskManager
    objects: list                      # what each name built (Task, Group or a tag's Tasks), in order
    leaves: dict                       # task name → lm_eval Task
    data_hash: dict = field(default_factory=dict)   # task name → sha256 of what it reads

    def key(self) -> dict:
        """What a cached result depends on besides the model: the harness version, settings and data."""
        import lm_eval
        return {"harness": lm_eval.__version__, **self.settings.record(), "data": dict(sorted(self.data_hash.items()))}

    def workload(self, tokenizer, sample: int = 16) -> tuple[int, int, int]:
        """(forward passes, batch, tokens per sequence) one evaluation needs, estimated before it runs: requests =
        docs × choices; tokens = the longest of the first `sample` docs' prompt + answer × (1 + few-shot)."""
        requests, longest = 0, 1
        for task in self.leaves.values():
            docs = task.eval_docs
            n = len(docs) if self.settings.limit is None else min(self.settings.limit, len(docs))
            for i in range(min(sample, n)):
                doc = docs[i]
                answers = (task.doc_to_choice(doc) if task.OUTPUT_TYPE == "multiple_choice"
                           else [str(task.doc_to_target(doc))])
                if i == 0:
                    requests += n * max(len(answers), 1)
                text = f"{task.doc_to_text(doc)} {max(map(str, answers), key=len, default='')}"
                longest = max(longest, len(tokenizer(text, add_special_tokens=False)["input_ids"]))
        tokens = longest * (1 + (self.settings.num_fewshot or 0))
        return math.ceil(requests / self.settings.batch_size), self.settings.batch_size, tokens

    def recall_tasks(self) -> dict[str, int]:
        """The local associative-recall tasks among these: name → their key count."""
        local = harness_tasks.local_tasks()
        return {n: local[n].recall_keys for n in self.leaves if n in local and local[n].recall_keys}


def prepare(settings: TaskSettings, say=None) -> TaskPlan:
    """Check the names, read every task's data (offline-capable), refuse a few-shot count a task cannot give.

    The Python files that the include path's task YAMLs name (`!function`) are refused unless
    `settings.allow_task_code`, and then each is named through `say` (default: stderr) before it runs."""
    _quiet()
    names = tuple(dict.fromkeys(t.strip() for t in settings.tasks))
    manager = harness_tasks.task_manager(names, settings.include_path)
    code = harness_tasks.task_code(manager, names) if settings.include_path else []
    if not settings.allow_task_code:
        task_yaml.refuse_code(code, names)
    for line in task_yaml.announce_code(code):
        (say or _stderr)(line)
    local = harness_tasks.local_tasks()
    reachable = all(n in local for n in names) or harness_tasks.hub_reachable()
    objects = [harness_tasks.load_one(manager, name, reachable) for name in names]
    leaves = harness_tasks.leaf_tasks(objects)
    if settings.num_fewshot:
        for name, task in leaves.items():
            pool = harness_tasks.fewshot_pool(task)
            if settings.num_fewshot > pool:
                raise AnalysisError(f"{settings.num_fewshot} few-shot examples are more than the {pool} that task "
                                    f"{name} can draw from; use at most {pool}.")
    plan = TaskPlan(settings, manager, objects, leaves)
    plan.data_hash = {n: harness_tasks.docs_hash(t, settings.num_fewshot) for n, t in leaves.items()}
    return plan


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _quiet() -> None:
    """The harness's and datasets' own logs and bars off: the project's progress and one-line errors speak."""
    os.environ.setdefault("DISABLE_MULTIPROC", "1")  # bootstrap in-process: no worker pool forked from a server
    import datasets
    import lm_eval.api.task
    import lm_eval.evaluator
    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity_error()
    for name in ("lm_eval", "lm-eval", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    lm_eval.api.task.tqdm = _no_bar  # its request-building bar has no switch; it would tear the CLI's own bar
    # the environment dump (torch's collect_env: pip and system probes, seconds per evaluation) and `git describe`
    # of the working directory (a "fatal: not a git repository" on stderr) go into results this module never reads
    lm_eval.evaluator.add_env_info = lambda results: None
    lm_eval.evaluator.get_git_commit_hash = lambda: None


def _no_bar(iterable=None, *args, **kwargs):
    return iterable


def tokenizer_for(model, tokenizer, plan: TaskPlan):
    """The tokenizer the harness reads with: the model's own, or a recall model's word tokenizer (recall tasks only)."""
    from analysis.data import inputs, recall_text
    task = inputs.recall_task(model)
    name = getattr(model, "analysis_name", "this model")
    recall = plan.recall_tasks()
    if task is None:
        if tokenizer is None:
            raise AnalysisError(f"{name} has no tokenizer, so lm-evaluation-harness cannot read text with it.")
        return tokenizer
    other = [n for n in plan.leaves if n not in recall]
    if other:
        names = ", ".join(n for n, t in harness_tasks.local_tasks().items() if t.recall_keys)
        raise AnalysisError(f"{name} is an associative-recall model without a tokenizer, so it reads only the "
                            f"associative-recall tasks ({names}), not {other[0]}.")
    wrong = {n: k for n, k in recall.items() if k != task.n_keys}
    if wrong:
        n = next(iter(wrong))
        raise AnalysisError(f"Task {n} writes {wrong[n]} keys, but {name} was trained on {task.n_keys}; its words "
                            "would not be the model's ids.")
    return recall_text.tokenizer(task)


def evaluate_tasks(model, tokenizer, settings: TaskSettings | TaskPlan, *, progress=None, cancel=None,
                   yes: bool = False, say=None) -> dict:
    """lm_eval.simple_evaluate on `model` → {"harness", "settings", "tasks": {name: row}, "groups": {...}}.

    A row: metrics {name: {"value", "stderr"}} (stderr as the harness computes it; null where it has none),
    `accuracy` / `accuracy_stderr` / `metric` (the headline, HEADLINE order), docs scored, few-shot count, data
    set and split, data hash, and for a local task its chance level. progress(fraction, text)."""
    plan = settings if isinstance(settings, TaskPlan) else prepare(settings)
    import lm_eval
    tok = tokenizer_for(model, tokenizer, plan)
    lm = project_lm(model, tok, plan.settings.batch_size, progress=progress, cancel=cancel, yes=yes, say=say)
    check(cancel)
    s = plan.settings
    results = lm_eval.simple_evaluate(model=lm, tasks=list(plan.objects), num_fewshot=s.num_fewshot, limit=s.limit,
                                      batch_size=s.batch_size, task_manager=plan.manager, log_samples=False,
                                      bootstrap_iters=s.bootstrap_iters)
    check(cancel)
    return {"harness": f"lm-evaluation-harness {lm_eval.__version__}", "settings": s.record(),
            "max_length": lm.max_length, "tasks": {n: _row(n, results, plan) for n in plan.leaves},
            "groups": {n: _metrics(r) for n, r in (results.get("groups") or {}).items()}}


def task_rows(measured: dict) -> dict:
    """The per-task numbers a measurement keeps beside perplexity (settings and data hash go in its cache key)."""
    keep = ("metric", "accuracy", "accuracy_stderr", "metrics", "docs", "num_fewshot", "dataset", "split", "chance")
    return {name: {k: row[k] for k in keep if k in row} for name, row in measured["tasks"].items()}


def _row(name: str, results: dict, plan: TaskPlan) -> dict:
    task = plan.leaves[name]
    metrics = _metrics(results["results"][name])
    headline = next((m for m in HEADLINE if m in metrics), next(iter(metrics), None))
    config = task.config
    local = harness_tasks.local_tasks().get(name)
    split = config.test_split or config.validation_split
    row = {"metrics": metrics, "metric": headline,
           "accuracy": metrics[headline]["value"] if headline else None,
           "accuracy_stderr": metrics[headline]["stderr"] if headline else None,
           "docs": int(results["n-samples"][name]["effective"]),
           "docs_total": int(results["n-samples"][name]["original"]),
           "num_fewshot": int(results["n-shot"].get(name) or 0),
           "dataset": f"local: sample_models/tasks/{name}.jsonl" if local else harness_tasks.dataset_label(config),
           "split": str(split), "data_sha256": plan.data_hash[name], "local": local is not None}
    if local is not None:
        row.update(chance=local.chance, chance_note=local.chance_note)
    return row


def _metrics(row: dict) -> dict:
    """{"acc": {"value": 0.31, "stderr": 0.015}, ...} from the harness's "acc,none" / "acc_stderr,none" keys."""
    out = {}
    for key, value in row.items():
        if "," not in key or "_stderr," in key or not _number(value):
            continue
        metric, filt = key.split(",", 1)
        stderr = row.get(f"{metric}_stderr,{filt}")
        out[metric if filt == "none" else f"{metric} ({filt})"] = {
            "value": float(value), "stderr": float(stderr) if _number(stderr) else None}
    return out


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def project_lm(model, tokenizer, batch_size: int, progress=None, cancel=None, yes: bool = False, say=None):
    """An HFLM on the loaded model (a copy of the tokenizer: the harness may set its pad token)."""
    if getattr(model, "streamed", False):  # the harness calls the model batch by batch and generates token by token
        raise AnalysisError("lm-evaluation-harness needs the model whole in memory (it calls it one padded batch at a "
                            "time and generates token by token), and this one is over the memory budget; raise "
                            "--max-memory, load it in bfloat16 (--dtype bfloat16) or use a GPU (--device cuda).")
    lm_class = _lm_class()
    try:
        return lm_class(model, copy.deepcopy(tokenizer), batch_size, progress, cancel, yes, say)
    except AnalysisError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise AnalysisError(f"lm-evaluation-harness cannot wrap {getattr(model, 'analysis_name', 'this model')} "
                            f"({type(exc).__name__}: {first}).") from None


_LM = None


def _lm_class():
    """The HFLM subclass, defined on first use (lm_eval is imported only when an evaluation runs)."""
    global _LM
    if _LM is None:
        from lm_eval.models.huggingface import HFLM

        class ProjectLM(HFLM):
            def __init__(self, model, tokenizer, batch_size, progress, cancel, yes, say):
                super().__init__(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
                self.project_name = getattr(model, "analysis_name", "the model")
                self.progress, self.cancel, self.yes, self.say = progress, cancel, yes, say
                self.done, self.total, self.what = 0, 0, ""

            def loglikelihood(self, requests, disable_tqdm=False):
                return super().loglikelihood(requests, disable_tqdm=True)

            def loglikelihood_rolling(self, requests, disable_tqdm=False):
                return super().loglikelihood_rolling(requests, disable_tqdm=True)

            def generate_until(self, requests, disable_tqdm=False):
                longest = max((len(self.tok_encode(r.args[0])) for r in requests), default=1) + self.max_gen_toks
                self._bound(len(requests), min(longest, self.max_length), longest, "generation requests")
                return super().generate_until(requests, disable_tqdm=True)

            def _loglikelihood_tokens(self, requests, disable_tqdm=False, override_bs=None):
                lengths = [min(len(c) + len(k), self.max_length) for _, c, k in requests] or [1]
                self._bound(len(requests), max(lengths), round(sum(lengths) / len(lengths)), "scored continuations")
                try:
                    return super()._loglikelihood_tokens(requests, disable_tqdm=True, override_bs=override_bs)
                finally:
                    self._report(self.total)

            def _model_call(self, inps, attn_mask=None, labels=None):
                check(self.cancel)  # Stop / Ctrl-C: within one batch
                out = super()._model_call(inps, attn_mask=attn_mask, labels=labels)
                self._report(self.done + int(inps.shape[0]))
                return out

            def _model_generate(self, context, max_length, stop, **generation_kwargs):
                check(self.cancel)
                out = super()._model_generate(context, max_length, stop, **generation_kwargs)
                self._report(self.done + int(context.shape[0]))
                return out

            def _bound(self, requests: int, longest: int, typical: int, what: str) -> None:
                """Memory of the longest batch and the time of all of them, before the first forward."""
                from analysis.models import limits, workload
                batch = int(self.batch_size)
                advice = "use fewer docs (--limit), a smaller batch or shorter tasks"
                limits.check_forward(self._model, batch, longest, f"Evaluating {self.project_name} on batches of "
                                     f"{batch} × {longest} tokens", advice)
                workload.check(f"lm-evaluation-harness, {requests:,} {what}", math.ceil(requests / batch),
                               self._model, batch, typical, advice, self.yes, self.say)
                self.done, self.total, self.what = 0, requests, what

            def _report(self, done: int) -> None:
                self.done = min(done, self.total)
                if self.progress is not None and self.total:
                    self.progress(self.done / self.total, f"{self.done:,} of {self.total:,} {self.what}")

        _LM = ProjectLM
    return _LM
