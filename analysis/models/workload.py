"""How long a piece of work will take here, said before it starts (memory is analysis.models.limits' job).

Work is counted in forward passes of one shape; one such forward is timed on this machine (zeros as input,
no gradient) when there are enough of them for the timing to be noise, and a training step counts as three
forwards (modelled: forward + backward). Past ANNOUNCE_S the estimate is one line before the work starts;
past MAX_S the work is refused unless the caller confirmed it (`--yes`).
"""
from __future__ import annotations

import math
import time
import weakref

import torch

from analysis.errors import AnalysisError

MAX_S = 3600.0        # longer work needs --yes
ANNOUNCE_S = 60.0     # shorter work starts without a word
MEASURE_FROM = 16     # fewer forwards than this: not worth a timing forward, and never near MAX_S on its own
TRAIN_STEP = 3        # a training step ≈ forward + backward ≈ three forwards
_forwards: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(device, batch, tokens): s}
_rates: dict = {}     # device -> fp32 matmul rate


def duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 4 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} days"


@torch.no_grad()
def forward_seconds(model, batch: int, tokens: int) -> float:
    """Seconds of one no-grad forward over [batch, tokens] on the model's device, timed once per shape."""
    param = next(model.parameters())
    # keyed by the model object itself (weakly), not id(model): a new model that reuses a freed one's id must not
    # inherit its time, and a freed model's timings go with it
    timed = _forwards.setdefault(model, {})
    key = (param.device, int(batch), int(tokens))
    if key not in timed:
        ids = torch.zeros(int(batch), int(tokens), dtype=torch.long, device=param.device)
        sync = torch.cuda.synchronize if param.device.type == "cuda" else (lambda: None)
        model(ids[:, :1], use_cache=False)  # first-call costs (kernel selection, lazy init) are not the work's
        sync()
        start = time.perf_counter()
        model(ids, use_cache=False)
        sync()
        timed[key] = time.perf_counter() - start
    return timed[key]


def check(what: str, forwards: int, model, batch: int, tokens: int, advice: str, yes: bool = False, say=None,
          per_forward: float = 1.0) -> None:
    """Refuse (unless `yes`) work of `forwards` passes over [batch, tokens] that would take more than MAX_S here;
    `say` gets a one-line estimate when it takes longer than ANNOUNCE_S. per_forward: forwards per unit
    (TRAIN_STEP for training steps)."""
    units = int(forwards)
    if units * per_forward < MEASURE_FROM:
        return
    each = forward_seconds(model, batch, tokens) * per_forward
    total = units * each
    kind = "training steps" if per_forward >= TRAIN_STEP else "forward passes"
    how = f"{per_forward:.3g} × a measured forward" if per_forward != 1 else "measured"
    line = (f"{what}: {units:,} {kind} of {int(batch)} × {int(tokens)} tokens × {duration(each)} ({how}) "
            f"≈ {duration(total)} here")
    if total > MAX_S and not yes:
        raise AnalysisError(f"{line}, more than the {duration(MAX_S)} a request may take unconfirmed; {advice} "
                            "(or, on the command line, pass --yes to run it anyway).")
    if total > ANNOUNCE_S and say is not None:
        say(f"estimate: {line}.")


def check_points(what: str, points: int, model, parts: list[tuple[int, int, int, float]], advice: str,
                 yes: bool = False, say=None) -> None:
    """Like `check` for `points` repetitions of mixed work: parts of (forwards, batch, tokens, per_forward)
    per point (e.g. a perplexity then recovery steps), summed over every point."""
    units = points * sum(n * per for n, _, _, per in parts)
    if units < MEASURE_FROM:
        return
    total = points * sum(n * per * forward_seconds(model, b, t) for n, b, t, per in parts if n)
    line = f"{what}: {points:,} points × {duration(total / max(points, 1))} each (from a measured forward) " \
           f"≈ {duration(total)} here"
    if total > MAX_S and not yes:
        raise AnalysisError(f"{line}, more than the {duration(MAX_S)} a request may take unconfirmed; {advice} "
                            "(or, on the command line, pass --yes to run it anyway).")
    if total > ANNOUNCE_S and say is not None:
        say(f"estimate: {line}.")


@torch.no_grad()
def flops_per_second(device: str = "cpu") -> float:
    """This machine's fp32 matmul rate now (one 512³ product after a warm-up): the basis of modelled times."""
    key = str(device)
    if key not in _rates:
        a = torch.randn(512, 512, device=device)
        a @ a
        sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        a @ a
        sync()
        _rates[key] = 2 * 512**3 / max(time.perf_counter() - start, 1e-9)
    return _rates[key]


def check_modelled(what: str, steps: int, flops_per_step: float, advice: str, yes: bool = False, say=None,
                   device: str = "cpu") -> None:
    """Like `check` for work with no model to time yet (training from scratch): FLOPs / the matmul rate here.
    A lower bound (small models spend much of their time outside matmuls), so it refuses only the absurd."""
    total = int(steps) * flops_per_step / flops_per_second(device)
    line = f"{what}: {int(steps):,} steps × {duration(total / max(int(steps), 1))} (modelled from FLOPs) " \
           f"≈ at least {duration(total)} here"
    if total > MAX_S and not yes:
        raise AnalysisError(f"{line}, more than the {duration(MAX_S)} a request may take unconfirmed; {advice} "
                            "(or pass --yes to run it anyway).")
    if total > ANNOUNCE_S and say is not None:
        say(f"estimate: {line}.")


def windows(n_tokens: int, context: int, stride: int) -> int:
    """Perplexity windows over n_tokens tokens (analysis.evaluate.perplexity): one every `stride` tokens."""
    return max(1, math.ceil(max(0, n_tokens - context) / stride) + 1)
