"""Recovery fine-tune after a prune, one workflow for the CLI, the sweep and the Prune page.

Methods: `qk` trains the pruned q/k rows at full rank (the reference's --model.freeze_non_target);
`lora` trains PEFT LoRA adapters on the q/k/v projections plus conv1d/norm/bias (the reference's
run_lora.sh); `lora-kd` adds distillation from the unpruned model, KL(softmax(t/T) ‖ softmax(s/T))·T²
(the default). AdamW, cosine to 0.1·lr, clip 1.0, on train-split windows. Validation-split perplexity is
measured at step 0 (the pruned model itself) and every `eval_every` steps; the best state is kept, so a
recovery never returns a model worse on validation than the one it started from. Unless asked for a size, each
check scores validation tokens in proportion to the run (a quarter of its training tokens spread over its checks,
between MIN_EVAL_WINDOWS windows and MAX_EVAL_TOKENS), so a few tiny steps are not validated on 4,096 tokens each;
each check keeps its per-window losses, and the kept step's change carries a paired standard error over them.
A stop can save the state (analysis.recovery_state) for a later call to resume.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from analysis.data import corpus as data
from analysis.models import limits, workload
from analysis.archs import adapter_for
from analysis.runtime.cancel import Cancelled, check, checked_inside
from analysis.errors import AnalysisError
from analysis.shrink.recovery_setup import LORA_METHODS, check_lora, merged, qk_trainable, trainable, wrap_lora

METHODS = ("qk", "lora", "lora-kd")
DEFAULT_LR = {"qk": 1e-3, "lora": 1e-4, "lora-kd": 1e-4}
MAX_EVAL_TOKENS = 4096     # validation tokens per check when the size follows the run
MIN_EVAL_WINDOWS = 4       # ... and at least this many windows of seq_len: a standard error needs a few
EVAL_SHARE = 0.25          # validation tokens in all, as a share of the training tokens


@dataclass(frozen=True)
class RecoverySettings:
    method: str = "lora-kd"
    steps: int = 100
    lr: float | None = None           # None: the method's default (DEFAULT_LR)
    batch: int = 8
    seq_len: int = 256
    rank: int = 32                    # LoRA methods
    alpha: float = 64.0
    temperature: float = 2.0          # lora-kd
    kd_weight: float = 1.0
    eval_every: int = 25              # validation perplexity every this many steps (and at step 0)
    eval_tokens: int | None = None    # validation tokens per check; None: in proportion to the run (validation_tokens)
    seed: int = 0

    @property
    def learning_rate(self) -> float:
        return DEFAULT_LR.get(self.method, 1e-4) if self.lr is None else float(self.lr)

    @property
    def checks(self) -> int:
        """Validation checks: step 0, every eval_every steps, and the last step."""
        return 1 + self.steps // self.eval_every + (1 if self.steps % self.eval_every else 0)

    @property
    def validation_tokens(self) -> int:
        """Tokens per validation check: `eval_tokens` when given, else EVAL_SHARE of the training tokens spread
        over the checks, in whole windows of seq_len, at least MIN_EVAL_WINDOWS of them and at most MAX_EVAL_TOKENS."""
        if self.eval_tokens is not None:
            return self.eval_tokens
        share = EVAL_SHARE * self.steps * self.batch * self.seq_len / self.checks
        windows = max(MIN_EVAL_WINDOWS, int(share // self.seq_len))
        return max(MIN_EVAL_WINDOWS * self.seq_len, min(MAX_EVAL_TOKENS, windows * self.seq_len))

    def record(self) -> dict:
        """The settings as saved with the model (method, rank, α, lr, steps, T, weight, ...)."""
        out = {**asdict(self), "lr": self.learning_rate, "eval_tokens": self.validation_tokens}
        if self.method not in LORA_METHODS:
            out.pop("rank"), out.pop("alpha")
        if self.method != "lora-kd":
            out.pop("temperature"), out.pop("kd_weight")
        return out


@dataclass
class RecoveryResult:
    model: object                     # the merged, plain model (no peft), eval mode, the input's dtype
    settings: dict                    # RecoverySettings.record()
    history: list = field(default_factory=list)     # per step: {"step", "lr", "ce", "kd", "loss"}
    validation: list = field(default_factory=list)  # {"step", "perplexity", "tokens", "windows"}; step 0 = the pruned model
    kept_step: int = 0                # the step whose state was kept (0: none improved on validation)
    validation_label: str = ""        # dataset, split, context, tokens of the validation checks
    resumed_from: int | None = None   # the step a saved state resumed at

    @property
    def final_loss(self) -> float | None:
        return self.history[-1]["loss"] if self.history else None

    def metadata(self) -> dict:
        """What the saved model's pruning JSON carries about its recovery."""
        kept = next(v for v in self.validation if v["step"] == self.kept_step)
        return {**self.settings, "kept_step": self.kept_step, "kept_validation_perplexity": kept["perplexity"],
                "start_validation_perplexity": self.validation[0]["perplexity"], "validation": self.validation_label,
                "validation_change": self.validation_change(), "final_loss": self.final_loss,
                "resumed_from": self.resumed_from}

    def validation_change(self) -> dict | None:
        """The kept step against step 0 on the same validation windows: {"delta_log_ppl", "se", "windows",
        "tokens"} (paired over windows); None without per-window losses (a state saved before they were kept)."""
        from analysis.evaluate.perplexity import paired_difference
        start = self.validation[0] if self.validation else {}
        kept = next((v for v in self.validation if v["step"] == self.kept_step), {})
        if not start.get("windows") or len(kept.get("windows") or []) != len(start["windows"]):
            return None
        return {**paired_difference(start["windows"], kept["windows"]), "tokens": start["tokens"]}


def check_settings(model, s: RecoverySettings, teacher=None) -> None:
    """One sentence for each setting that cannot work, before any work."""
    if getattr(model, "streamed", False):  # gradients through the whole model: recovery is never streamed
        limits.check_whole_model_training(model, "Recovery", s.batch, s.seq_len)
    if s.method not in METHODS:
        raise AnalysisError(f"Unknown recovery method {s.method!r}; use one of {', '.join(METHODS)}.")
    for name, low in (("steps", 0), ("batch", 1), ("seq_len", 2), ("eval_every", 1), ("validation_tokens", 2)):
        value = getattr(s, name)
        if int(value) != value or value < low:
            raise AnalysisError(f"Recovery {name.replace('_', ' ')} must be a whole number ≥ {low}, got {value}.")
    if not (s.learning_rate > 0 and math.isfinite(s.learning_rate)):
        raise AnalysisError(f"The recovery learning rate must be a positive number, got {s.learning_rate}.")
    if s.method in LORA_METHODS:
        if not (s.alpha > 0 and math.isfinite(s.alpha)):
            raise AnalysisError(f"LoRA alpha must be a positive number, got {s.alpha}.")
        check_lora(model, int(s.rank)) if int(s.rank) == s.rank else _bad_rank(s.rank)
    if s.method == "lora-kd":
        if not (s.temperature > 0 and math.isfinite(s.temperature)):
            raise AnalysisError(f"The distillation temperature T must be positive, got {s.temperature}.")
        if not (s.kd_weight >= 0 and math.isfinite(s.kd_weight)):
            raise AnalysisError(f"The distillation weight must be zero or positive, got {s.kd_weight}.")
        if teacher is None:
            raise AnalysisError("lora-kd distils from the unpruned model, and none was given; pass the unpruned "
                                "model as the teacher or use --recover-method lora.")
        if teacher.config.vocab_size != model.config.vocab_size:
            raise AnalysisError("The teacher's vocabulary differs from the pruned model's; distil from the model "
                                "that was pruned.")


def _bad_rank(rank):
    raise AnalysisError(f"LoRA rank must be a whole number ≥ 1, got {rank}.")


def check_sizes(model, s: RecoverySettings, yes: bool = False, say=None, distils: bool | None = None) -> None:
    """Memory (student training step, plus the teacher's no-grad forward and the KD softmaxes) and time
    (training steps, teacher forwards and validation checks) before the first step."""
    distils = s.method == "lora-kd" if distils is None else distils
    if s.steps < 1:
        return
    limits.check_recovery(model, s.batch, s.seq_len, teacher=model if distils else None)
    per_step = workload.TRAIN_STEP + (1 if distils else 0)  # forward + backward, plus the teacher's forward
    # the validation checks' forwards (8 windows of seq_len each), spread over the steps at [batch, seq_len]
    validation = s.checks * max(1, s.validation_tokens // s.seq_len) / (s.batch * s.steps)
    workload.check("Recovery fine-tuning", s.steps, model, s.batch, s.seq_len,
                   "use fewer recovery steps, a smaller batch or fewer validation checks", yes, say,
                   per_forward=per_step + validation)


def kd_loss(student_logits, teacher_logits, temperature: float):
    """KL(softmax(t/T) ‖ softmax(s/T))·T², summed over the vocabulary, mean over positions (Hinton et al.)."""
    log_s = F.log_softmax(student_logits / temperature, -1)
    log_t = F.log_softmax(teacher_logits / temperature, -1)
    return (log_t.exp() * (log_t - log_s)).sum(-1).mean() * temperature ** 2


def step_loss(work, ids, s: RecoverySettings, teacher=None) -> dict:
    """{"ce", "kd", "loss"} tensors of one batch: next-token CE plus kd_weight × KD (lora-kd)."""
    logits = work(ids, use_cache=False).logits[:, :-1].float()
    ce = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    if s.method != "lora-kd":
        return {"ce": ce, "kd": None, "loss": ce}
    with torch.no_grad():
        target = teacher(ids, use_cache=False).logits[:, :-1].float()
    kd = kd_loss(logits, target, s.temperature)
    return {"ce": ce, "kd": kd, "loss": ce + s.kd_weight * kd}


def _validation(model, tokenizer, s: RecoverySettings) -> dict:
    from analysis.evaluate.perplexity import perplexity
    was = model.training
    model.eval()
    out = perplexity(model, tokenizer, "validation", context=s.seq_len, max_tokens=s.validation_tokens, yes=True,
                     per_window=True)
    model.train(was)
    return out


def recover(model, tokenizer, settings: RecoverySettings = RecoverySettings(), teacher=None, progress=None,
            cancel=None, yes: bool = False, say=None, state_dir=None, resume: bool | None = None,
            state_context: dict | None = None) -> RecoveryResult:
    """A recovered COPY of the pruned `model` (never changed). `teacher`: the unpruned model (lora-kd).

    progress(event): {"kind": "train", "step", "steps", "ce", "kd", "loss", "lr"} after each step and
    {"kind": "validation", "step", "steps", "perplexity"} after each check. `cancel` is checked before every
    step; on a stop with `state_dir` the state is saved there before Cancelled propagates. A later call with
    a saved state in `state_dir` must say `resume=True` (continue) or `resume=False` (discard, start over);
    `state_context` (what was pruned: model, strategy, ratios, ...) is saved with it and must match on resume."""
    from analysis.io.point_identity import model_identity
    from analysis.io.recovery_state import (check_state_folder, discard_state, finish_state, has_state, load_state,
                                           save_state)
    s = settings
    check_settings(model, s, teacher)
    check_sizes(model, s, yes, say)
    record = s.record()
    saved = None
    if state_dir is not None:
        check_state_folder(state_dir, "The recovery state folder")  # a model or anything of yours: refused before work
    identity = model_identity(model) if state_dir is not None else ""  # which pruned model a saved state trains
    if has_state(state_dir):
        if resume is None:
            raise AnalysisError(f"A stopped recovery is saved in {state_dir}; resume it or discard it.")
        if resume:
            saved = load_state(state_dir, record, identity, state_context)
        else:
            discard_state(state_dir)
    elif resume and say is not None:
        say(f"no saved recovery state in {state_dir}: starting at step 0")
    dtype = next(model.parameters()).dtype
    work = copy.deepcopy(model).float().train()
    work.requires_grad_(False)
    if s.method in LORA_METHODS:
        with torch.random.fork_rng(devices=[]):  # LoRA A's random init, seeded, leaving the caller's RNG alone
            torch.manual_seed(s.seed)
            work = wrap_lora(work, int(s.rank), s.alpha)
    else:
        qk_trainable(work)
    params = trainable(work)
    net = work.get_base_model() if s.method in LORA_METHODS else work  # the model with the adapters injected
    optimizer = torch.optim.AdamW(list(params.values()), lr=s.learning_rate, weight_decay=0.0, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(s.seed)
    best = {n: p.detach().clone() for n, p in params.items()}
    result = RecoveryResult(model=None, settings=record)
    start = 0
    if saved is not None:
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(saved["params"][n])
        best = {n: saved["best"][n].to(params[n].device) for n in params}
        optimizer.load_state_dict(saved["trainer"]["optimizer"])
        gen.set_state(saved["trainer"]["generator"])
        start = result.resumed_from = saved["step"]
        result.history, result.validation, result.kept_step = saved["history"], saved["validation"], saved["kept_step"]
        result.validation_label = saved["validation_label"]
    train_ids = data.encoded_split("train", tokenizer) if s.steps else None
    # where a stop lands inside a forward or backward: each block's mixer and the output head (in a small model the
    # head over the whole vocabulary is most of a step)
    head = net.get_output_embeddings()
    blocks = [b.module for b in adapter_for(net).blocks(net)] + ([head] if head is not None else [])
    if len(result.validation) == 0:
        with checked_inside(blocks, cancel):
            first = _validation(net, tokenizer, s)
        result.validation_label = (f"{first['dataset']}, context {first['context']}, {first['tokens']} tokens, "
                                   f"{first['device']} {first['dtype']} (the training copy)")
        result.validation.append({"step": 0, "perplexity": first["perplexity"], "tokens": first["tokens"],
                                  "windows": first["window_losses"]})
        _tell(progress, {"kind": "validation", "step": 0, "steps": s.steps, "perplexity": first["perplexity"]})
    device = next(work.parameters()).device
    done = start  # steps finished (their update made and recorded): what a stop saves and a resume continues from
    try:
        for step in range(start, s.steps):
            check(cancel)
            lr = s.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / s.steps)))
            for group in optimizer.param_groups:
                group["lr"] = lr
            starts = torch.randint(0, len(train_ids) - s.seq_len, (s.batch,), generator=gen).tolist()
            ids = torch.stack([train_ids[i:i + s.seq_len] for i in starts]).to(device)
            with checked_inside(blocks, cancel):  # Cancelled there: no update made, the step is redone on resume
                losses = step_loss(net, ids, s, teacher)
            optimizer.zero_grad(set_to_none=True)
            losses["loss"].backward()
            torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
            optimizer.step()
            point = {"step": step + 1, "lr": lr, **{k: (None if v is None else v.item()) for k, v in losses.items()}}
            result.history.append(point)
            done = step + 1
            _tell(progress, {"kind": "train", "steps": s.steps, **point})
            if (step + 1) % s.eval_every == 0 or step + 1 == s.steps:
                with checked_inside(blocks, cancel):  # Cancelled there: this check is skipped on resume
                    checked = _validation(net, tokenizer, s)
                ppl = checked["perplexity"]
                result.validation.append({"step": step + 1, "perplexity": ppl, "tokens": checked["tokens"],
                                          "windows": checked["window_losses"]})
                _tell(progress, {"kind": "validation", "step": step + 1, "steps": s.steps, "perplexity": ppl})
                if ppl < min(v["perplexity"] for v in result.validation[:-1]):
                    best = {n: p.detach().clone() for n, p in params.items()}
                    result.kept_step = step + 1
    except Cancelled:
        if state_dir is not None:
            save_state(state_dir, settings=record, identity=identity, config=model.config.to_dict(), step=done,
                       params=params, best=best, optimizer=optimizer, generator=gen, context=state_context,
                       record={"history": result.history, "validation": result.validation,
                               "kept_step": result.kept_step, "validation_label": result.validation_label})
        raise
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(best[n])
    plain = merged(work, s.method)
    plain.requires_grad_(False)
    result.model = plain.eval().to(dtype)
    if state_dir is not None:
        finish_state(state_dir)  # finished: the result replaces the stopped state (only ever a recovery state)
    return result


def _tell(progress, event: dict) -> None:
    if progress is not None:
        progress(event)
