"""Reproducible training of small models of the trainable families (analysis.archs.TRAINABLE; CPU torch path or
the family's kernels on GPU).

AdamW with linear warm-up then cosine decay, fixed seed, periodic validation, resumable checkpoints
(model + optimizer + RNG + history, written atomically as safetensors + JSON, never a pickle), progress
lines, and a time budget that ends training cleanly. Two tasks: next-token language modelling on the
bundled Shakespeare train split, and multi-query associative recall (analysis.data.recall).
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from analysis.archs import TRAINABLE, get_adapter
from analysis.errors import AnalysisError
from analysis.io.model_dir import save_model_dir
from analysis.io.writes import check_new_dir, kind_of, marker_record, os_errors, show
from analysis.io.trainer_state import load_trainer_state, save_trainer_state


@dataclass
class TrainConfig:
    out: str
    arch: str = TRAINABLE[0]           # a family in analysis.archs.TRAINABLE
    task: str = "lm"                   # or recall
    hidden_size: int = 256
    layers: int = 4
    heads: int = 4
    head_dim: int = 64
    key_heads: int | None = None       # hybrids: linear-attention key heads (heads = value heads); default heads // 2
    intermediate_size: int | None = None  # hybrids: MLP width; default 2 × hidden
    full_attention_interval: int = 4   # hybrids: every 4th block is softmax attention (3 linear : 1 full)
    model_type: str | None = None      # which of the family's model types to build (its adapter's training_model_types)
    state_size: int | None = None      # Mamba-2: N, the key dim of the state (default head_dim)
    seq_len: int = 256
    batch: int = 8
    steps: int = 1000
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    clip: float = 1.0
    eval_every: int = 100
    eval_windows: int = 64
    checkpoint_every: int = 200
    max_minutes: float | None = None
    stop_at: int | None = None         # stop cleanly after this step, keeping the schedule of `steps` (resume later)
    seed: int = 0
    device: str = "auto"
    recall_pairs: int = 16
    recall_keys: int = 128
    history: list = field(default_factory=list)


def build_model(cfg: TrainConfig, vocab_size: int):
    """A freshly initialised model of the family `cfg.arch` (its adapter builds the config), seeded."""
    from analysis.archs.install import ready
    ready()  # the CPU path for fla's ops and the project's model types
    from transformers import AutoModelForCausalLM
    if cfg.arch not in TRAINABLE:
        raise AnalysisError(f"Unknown architecture {cfg.arch!r}; use one of {', '.join(TRAINABLE)}.")
    adapter = get_adapter(cfg.arch)
    adapter.check_training_choices(cfg)
    config = adapter.training_config(cfg, vocab_size)
    torch.manual_seed(cfg.seed)
    return AutoModelForCausalLM.from_config(config)


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class _LMData:
    def __init__(self, cfg: TrainConfig):
        from analysis.data import corpus as data
        self.tokenizer = data.load_tokenizer()
        self.train = data.encode(data.load_text("train"), self.tokenizer)
        self.valid = data.token_windows(data.encode(data.load_text("validation"), self.tokenizer), cfg.seq_len,
                                        max_windows=cfg.eval_windows)
        self.cfg = cfg

    def batch(self, gen):
        starts = torch.randint(0, len(self.train) - self.cfg.seq_len, (self.cfg.batch,), generator=gen)
        ids = torch.stack([self.train[s:s + self.cfg.seq_len] for s in starts.tolist()])
        return ids, ids

    @torch.no_grad()
    def evaluate(self, model) -> dict:
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for chunk in self.valid.split(16):
            chunk = chunk.to(device)
            logits = model(chunk, use_cache=False).logits[:, :-1].float()
            total += float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(),
                                                             reduction="sum"))
            count += chunk[:, 1:].numel()
        return {"val_loss": total / count, "val_ppl": math.exp(total / count)}


class _RecallData:
    def __init__(self, cfg: TrainConfig):
        from analysis.data.recall import RecallTask
        self.task = RecallTask(n_keys=cfg.recall_keys, n_values=cfg.recall_keys, n_pairs=cfg.recall_pairs,
                               n_queries=cfg.recall_pairs)
        self.cfg = cfg

    def batch(self, gen):
        from analysis.data.recall import recall_batch
        return recall_batch(self.task, self.cfg.batch, gen)

    def evaluate(self, model) -> dict:
        from analysis.data.recall import recall_accuracy
        return {"recall_accuracy": recall_accuracy(model, self.task, n_sequences=256)}


CHECKPOINT = "training checkpoint"  # the marker's label of a work folder's checkpoint/ (analysis.io.marker)


def check_work_folder(work: Path) -> None:
    """The work folder holds the checkpoint/ of this training: never inside a folder the tool wrote as something
    else (a model, a recovery state, a card), nor a file or a link; one sentence before any work."""
    for folder in [work, *work.parents]:
        record = marker_record(folder) if folder.is_dir() else None
        if record is not None:
            raise AnalysisError(f"--work {show(work)} is inside {show(folder)}, a {kind_of(record.get('kind'))} "
                                "folder this tool wrote, which must keep only its own files; give the training "
                                "a work folder of its own.")
    if os.path.islink(work) or (os.path.lexists(work) and not work.is_dir()):
        raise AnalysisError(f"--work {show(work)} is a file or a link; give a folder for the training's checkpoints.")


def _save_checkpoint(out: Path, model, optimizer, step, gen, cfg):
    """out/checkpoint, replaced atomically (and only if this project wrote it); the state holds no pickle."""
    def trainer_state(tmp: Path) -> None:
        save_trainer_state(tmp, optimizer.state_dict(), step, gen.get_state(), torch.get_rng_state())
    save_model_dir(model, out / "checkpoint", json_files={"train_config.json": asdict(cfg)}, extra=trainer_state,
                   overwrite=True, kind=CHECKPOINT)


# settings a resumed run must share with its checkpoint: the model's shape, the data stream and the schedule
RESUME_FIXED = ("arch", "task", "hidden_size", "layers", "heads", "head_dim", "key_heads", "intermediate_size",
                "full_attention_interval", "model_type", "state_size", "seq_len", "batch", "lr", "warmup", "seed",
                "recall_pairs", "recall_keys")


def _resume_state(cfg: TrainConfig, ckpt: Path) -> dict | None:
    """The trainer state to resume from (None: no checkpoint), after finishing an interrupted checkpoint swap;
    settings that contradict the checkpoint are one sentence."""
    if not ckpt.exists():
        _promote_interrupted(ckpt)
    if not ckpt.exists():
        return None
    try:
        saved = json.loads((ckpt / "train_config.json").read_text())
        assert isinstance(saved, dict) and isinstance(saved.get("history"), list)
    except (OSError, ValueError, AssertionError):
        raise AnalysisError(f"{ckpt} has no readable train_config.json; start without --resume "
                            "or restore the checkpoint.") from None
    for name in RESUME_FIXED:
        if name in saved and saved[name] != getattr(cfg, name):
            raise AnalysisError(f"--{name.replace('_', '-')} {getattr(cfg, name)} contradicts the checkpoint in "
                                f"{ckpt} (trained with {saved[name]}); resume with the checkpoint's settings "
                                "or start a new --work directory.")
    return load_trainer_state(ckpt)


def _promote_interrupted(ckpt: Path) -> None:
    """A checkpoint whose first save was killed after it was complete but before it took its name: use it."""
    import sys
    from analysis.io import swap
    best = None
    for tmp in ckpt.parent.glob(f".{ckpt.name}.*.partial") if ckpt.parent.is_dir() else []:
        marker = swap.marker_record(tmp)
        if marker is None or marker.get("state") == "partial" or not (tmp / "trainer_state.json").is_file():
            continue
        try:
            step = int(json.loads((tmp / "trainer_state.json").read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if best is None or step > best[0]:
            best = (step, tmp)
    if best is not None:
        with os_errors("recover the checkpoint in", ckpt.parent):
            if not swap.publish(best[1], ckpt):
                return  # another run gave it its name meanwhile
        print(f"note: recovered the complete checkpoint of step {best[0]} that an interrupted save left in "
              f"{best[1].name}.", file=sys.stderr)


def _load_checkpoint_model(ckpt: Path):
    """The checkpoint's weights, safetensors only: a pytorch_model.bin (a pickle) is never opened."""
    from transformers import AutoModelForCausalLM
    if not [p for p in ckpt.glob("*.safetensors") if not p.name.startswith("trainer_state")]:
        raise AnalysisError(f"{ckpt} has no .safetensors weights (pickled .bin files are never loaded); "
                            "start without --resume.")
    try:
        return AutoModelForCausalLM.from_pretrained(ckpt, use_safetensors=True, trust_remote_code=False)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else "no message"
        raise AnalysisError(f"The checkpoint in {ckpt} cannot be loaded ({type(exc).__name__}: {first}); "
                            "start without --resume or restore it.") from None


def train(cfg: TrainConfig, resume: bool = False, log=print, progress=None, note=None) -> tuple:
    """Train and return (model, cfg) with cfg.history filled; the caller saves the final model.
    progress(steps_done, steps) is called after every step; note(line) gets the line saying where training
    starts (default: log)."""
    from analysis.models.load import resolve_device
    from analysis.archs.install import ready
    ready()  # a resumed checkpoint is loaded below: fla's model types and the CPU path first
    note = note or log
    out = Path(cfg.out)
    check_work_folder(out)
    check_new_dir(out / "checkpoint", overwrite=True, kind=CHECKPOINT)  # before any work: only a checkpoint of ours
    ckpt = out / "checkpoint"
    state = _resume_state(cfg, ckpt) if resume else None  # refuses contradicting settings before any work
    with os_errors("create the work directory", out):
        out.mkdir(parents=True, exist_ok=True)
        from analysis.io.swap import tidy
        tidy(out, keep={"checkpoint"})  # leftovers of a killed checkpoint save (after any was recovered above)
    device = resolve_device(cfg.device)
    dataset = _LMData(cfg) if cfg.task == "lm" else _RecallData(cfg)
    vocab = len(dataset.tokenizer) if cfg.task == "lm" else dataset.task.vocab_size
    gen = torch.Generator().manual_seed(cfg.seed)
    start_step = 0
    if state is not None:
        model = _load_checkpoint_model(ckpt)
        cfg.history = json.loads((ckpt / "train_config.json").read_text())["history"]
        start_step = state["step"]
        gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        note(f"resumed from step {start_step} (checkpoint {ckpt})")
    else:
        if resume:
            note(f"no checkpoint in {out}: starting at step 0")
        model = build_model(cfg, vocab)
    from analysis.models import limits
    limits.check_whole_model_training(model, "Training", cfg.batch, cfg.seq_len)  # never streamed
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embeddings" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embeddings" not in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=cfg.betas)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
    t0 = time.time()
    elapsed_before = cfg.history[-1]["elapsed_s"] if cfg.history else 0.0
    step = start_step - 1  # a run resumed at its last step trains no more: steps_done stays start_step
    for step in range(start_step, cfg.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        ids, labels = dataset.batch(gen)
        loss = model(ids.to(device), labels=labels.to(device)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        optimizer.step()
        elapsed = elapsed_before + time.time() - t0
        if progress:
            progress(step + 1, cfg.steps)
        last = (step + 1 == cfg.steps or (cfg.stop_at and step + 1 >= cfg.stop_at)
                or (cfg.max_minutes and elapsed > 60 * cfg.max_minutes))
        if (step + 1) % cfg.eval_every == 0 or last:
            model.eval()
            metrics = dataset.evaluate(model)
            model.train()
            tokens_seen = (step + 1) * cfg.batch * ids.shape[1]
            cfg.history.append({"step": step + 1, "tokens": tokens_seen, "elapsed_s": round(elapsed, 1),
                                "train_loss": round(loss.item(), 4), "lr": optimizer.param_groups[0]["lr"],
                                **{k: round(v, 4) for k, v in metrics.items()}})
            log(json.dumps(cfg.history[-1]))
        if (step + 1) % cfg.checkpoint_every == 0 or last:
            _save_checkpoint(out, model, optimizer, step + 1, gen, cfg)
        if last:
            break
    model.eval()
    cfg.steps_done = step + 1
    return model, cfg
