"""`prune --recover-*`: the recovery method and its settings, and running it with Ctrl-C as a clean stop that
saves the state for `--recover-resume` (see analysis/shrink/recovery.py)."""
from __future__ import annotations

import signal
import threading

from analysis.cli.commands.checks import real, whole
from analysis.cli.commands.progress import bar, set_done
from analysis.errors import AnalysisError

DEFAULTS = dict(method="lora-kd", rank=32, alpha=64.0, temperature=2.0, kd_weight=1.0, batch=8, seq_len=256,
                eval_every=25, eval_tokens=None)


def add_recovery_args(p) -> None:
    p.add_argument("--recover-steps", type=whole(0), default=0, help="recovery fine-tuning steps after the prune")
    p.add_argument("--recover-method", choices=["qk", "lora", "lora-kd"], default=DEFAULTS["method"],
                   help="qk: the pruned q/k rows at full rank; lora: LoRA on q/k/v plus conv/norm/bias; lora-kd: "
                        "lora plus distillation from the unpruned model (default)")
    p.add_argument("--recover-rank", type=whole(0), default=DEFAULTS["rank"], help="LoRA rank (default 32)")
    p.add_argument("--recover-alpha", type=real(0), default=DEFAULTS["alpha"], help="LoRA alpha (default 64)")
    p.add_argument("--recover-lr", type=real(0), default=None,
                   help="peak learning rate (default 1e-4 for lora methods, 1e-3 for qk); cosine to 0.1×")
    p.add_argument("--recover-batch", type=whole(1), default=DEFAULTS["batch"], help="sequences per step (default 8)")
    p.add_argument("--recover-seq-len", type=whole(2), default=DEFAULTS["seq_len"],
                   help="tokens per sequence (default 256)")
    p.add_argument("--kd-temperature", type=real(), default=DEFAULTS["temperature"],
                   help="lora-kd: softmax temperature T (default 2)")
    p.add_argument("--kd-weight", type=real(), default=DEFAULTS["kd_weight"],
                   help="lora-kd: weight of the distillation term (default 1)")
    p.add_argument("--recover-eval-every", type=whole(1), default=DEFAULTS["eval_every"],
                   help="validation perplexity every this many steps; the best state is kept (default 25)")
    p.add_argument("--recover-eval-tokens", type=whole(2), default=DEFAULTS["eval_tokens"],
                   help="validation tokens per check (default: a quarter of the training tokens spread over the "
                        "checks, at least 4 windows, at most 4096)")
    p.add_argument("--recover-state", default=None,
                   help="folder where Ctrl-C saves a stopped recovery's state (safetensors + JSON)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--recover-resume", action="store_true", help="continue the recovery saved in --recover-state")
    resume.add_argument("--recover-discard", action="store_true", help="discard the recovery saved in --recover-state")


def recovery_settings(args):
    """The RecoverySettings the arguments ask for; one sentence for a value that cannot work."""
    from analysis.shrink.recovery import RecoverySettings
    if args.recover_lr is not None and args.recover_lr <= 0:
        raise AnalysisError(f"--recover-lr must be positive, got {args.recover_lr:g}.")
    if args.recover_method in ("lora", "lora-kd") and args.recover_rank < 1:
        raise AnalysisError(f"--recover-rank must be at least 1, got {args.recover_rank}; LoRA needs a rank ≥ 1.")
    if args.recover_method == "lora-kd":
        if args.kd_temperature <= 0:
            raise AnalysisError(f"--kd-temperature must be positive, got {args.kd_temperature:g}.")
        if args.kd_weight < 0:
            raise AnalysisError(f"--kd-weight must be zero or positive, got {args.kd_weight:g}.")
    if (args.recover_resume or args.recover_discard) and not args.recover_state:
        raise AnalysisError("--recover-resume and --recover-discard act on --recover-state; give that folder too.")
    return RecoverySettings(method=args.recover_method, steps=args.recover_steps, lr=args.recover_lr,
                            batch=args.recover_batch, seq_len=args.recover_seq_len, rank=args.recover_rank,
                            alpha=args.recover_alpha, temperature=args.kd_temperature, kd_weight=args.kd_weight,
                            eval_every=args.recover_eval_every, eval_tokens=args.recover_eval_tokens, seed=args.seed)


def check_recovery_state(args) -> None:
    """--recover-state, before any work: a new folder or a recovery state this tool saved (never a model, a
    foreign folder, a file, a link or a FIFO, never --out or a folder around it); a saved state needs
    --recover-resume or --recover-discard, and a resume the settings and pruning it was saved with."""
    import os
    from analysis.io.recovery_state import check_resumable, check_state_folder, has_state
    if not args.recover_state:
        return
    if not args.recover_steps:
        raise AnalysisError("--recover-state keeps a stopped recovery; it needs --recover-steps.")
    state = check_state_folder(args.recover_state)
    out = os.path.abspath(os.path.expanduser(args.out))
    if os.path.commonpath([state, out]) in (str(state), out):
        raise AnalysisError("--recover-state and --out must be separate folders, neither inside the other; choose "
                            "another --recover-state.")
    if has_state(state):
        if not (args.recover_resume or args.recover_discard):
            raise AnalysisError(f"A stopped recovery is saved in {args.recover_state}; add --recover-resume to "
                                "continue it or --recover-discard to start over.")
        if args.recover_resume:
            check_resumable(state, recovery_settings(args).record(), state_context(args))


def state_context(args) -> dict:
    """What a recovery state was pruned from and how: saved with it, compared before a resume's work."""
    import os
    model = os.path.realpath(args.model) if os.path.isdir(args.model) else args.model
    return {"model": model, **{k: getattr(args, k, None) for k in (
        "strategy", "ratio", "ratios", "round_to", "rescale", "seed", "calib_sequences", "calib_tokens", "allocate",
        "budget", "map")}}


def recover_for_cli(args, pruned, tokenizer, teacher, evaluation):
    """recover_and_measure() with progress bars; Ctrl-C stops after the current step and saves the state
    (--recover-state)."""
    from analysis.runtime.cancel import Cancelled
    from analysis.cli.commands.common import announce
    from analysis.shrink.prune_workflow import recover_and_measure
    settings = recovery_settings(args)
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set()) \
        if args.recover_state and threading.current_thread() is threading.main_thread() else None
    resume = True if args.recover_resume else (False if args.recover_discard else None)
    try:
        with bar(args, f"prune: {settings.method} recovery", total=settings.steps, unit="step") as b:
            def step_done(event):
                if event["kind"] == "train":
                    set_done(b, event["step"], event["steps"])
                    b.set_postfix(loss=f"{event['loss']:.3f}", refresh=False)
            return recover_and_measure(pruned, tokenizer, settings, evaluation, teacher=teacher, progress=step_done,
                                       cancel=stop, yes=True, say=announce, state_dir=args.recover_state,
                                       resume=resume, state_context=state_context(args),  # estimated up front
                                       # then the test measurement:
                                       measure_progress=lambda f: b.set_postfix_str(f"test measurement {f:.0%}"))
    except Cancelled:
        from analysis.io.recovery_state import has_state
        if not has_state(args.recover_state):  # stopped while the finished recovery was being measured
            raise AnalysisError("Stopped while the recovered model was measured; nothing was saved: run the same "
                                "command again.") from None
        raise AnalysisError(f"Recovery stopped; its state is saved in {args.recover_state}: run the same command "
                            "with --recover-resume to continue it, or --recover-discard to start over.") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
