"""Memory estimates that bound every size a user can type, checked before the work starts.

One request may use at most MEMORY_FRACTION of the memory available right now (the dashboard is a shared
server: the models and other sessions need the rest). Estimates are deliberately simple upper-ish sums of
the big tensors (logits, activations, recurrent states, parameters); they say "about".
"""
from __future__ import annotations

import os

import torch

from analysis.errors import AnalysisError
from analysis.models import budget

MEMORY_FRACTION = 0.5
EXACT_LAYERS = 256  # configs with more layers are counted from a 1- and a 2-layer build (linear in layers)
CHUNK = 64          # tokens per chunk of the chunked recurrence (fla's and the CPU path's)


def available_memory(device: str | torch.device = "cpu") -> int | None:
    """Bytes available now: free GPU memory for CUDA, else /proc/meminfo MemAvailable (None if unknown)."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:  # other Unixes: free physical pages (an underestimate of what could be reclaimed)
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def size_text(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def allowed(device: str | torch.device = "cpu") -> tuple[float | None, str]:
    """(bytes this request may hold beyond the baseline, how that was decided in words): its memory budget
    (`--max-memory`, never more than is available now), else MEMORY_FRACTION of the memory available now;
    (None, ...) when neither is known."""
    available = available_memory(device)
    chosen = budget.current()
    if chosen is not None:
        if available is not None and available < chosen:
            return available, (f"the {size_text(available)} available now (less than the memory budget of "
                               f"{budget.size_text(chosen)})")
        return chosen, f"the memory budget of {budget.size_text(chosen)}"
    if available is None:
        return None, "unknown"
    return available * MEMORY_FRACTION, (f"the {size_text(available * MEMORY_FRACTION)} one request may use here "
                                         f"({MEMORY_FRACTION:.0%} of the {size_text(available)} available now)")


def require(need: float, what: str, advice: str, device: str | torch.device = "cpu") -> None:
    """Raise one sentence when `what` needs more than this request may hold (see `allowed`)."""
    limit, how = allowed(device)
    if limit is None:
        return  # nothing to compare with: let the work run
    if need > limit:
        where = "GPU memory" if torch.device(device).type == "cuda" else "memory"
        raise AnalysisError(f"{what} needs about {size_text(need)} of {where}, more than {how}; {advice}.")


# ---- parameters, from the config alone ------------------------------------------------------------

def parameter_count(config: dict) -> int:
    """Parameters of the model a config.json describes, counted on the meta device (no memory used).

    Up to EXACT_LAYERS layers the model is built as is (exact); deeper configs are counted from a 1- and a
    2-layer build (embedding + per-layer cost × layers; per-layer key dims take their largest value).
    """
    from analysis.archs.install import ready
    ready()  # the CPU path for fla's ops and the project's model types
    layers = config.get("num_hidden_layers")
    if layers <= EXACT_LAYERS:
        return _meta_count(config)
    one, two = (_meta_count(_with_layers(config, n)) for n in (1, 2))
    return one + (two - one) * (layers - 1)


def _with_layers(config: dict, n: int) -> dict:
    from analysis.archs import adapter_for
    layers = config["num_hidden_layers"]
    out = {**config, "num_hidden_layers": n}
    for key, value in config.items():  # a hybrid's kind of each layer (layer_types, ...): the first n
        if isinstance(value, list) and len(value) == layers and value and all(isinstance(v, str) for v in value):
            out[key] = value[:n]
    for key in (adapter_for(config).key_dims_config_key, "readout_key_dims"):  # per-layer lists: the widest, n times
        if isinstance(config.get(key), list) and config[key]:
            out[key] = [max(config[key])] * n
    return out


def _meta_count(config: dict) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())  # tied weights counted once


def model_fits(params: int, dtype: torch.dtype, device) -> bool:
    """Do the weights alone fit what this request may hold (else the model is streamed, or refused)?"""
    limit, _ = allowed(device)
    return limit is None or params * torch.empty((), dtype=dtype).element_size() <= limit


def check_model_fits(params: int, dtype: torch.dtype, device, where: str) -> None:
    """Refuse, before loading, a model whose weights alone exceed this request's share of the memory."""
    element = torch.empty((), dtype=dtype).element_size()
    smaller = "pick a smaller model (check num_hidden_layers, hidden_size and vocab_size in its config.json)"
    if element > 2:
        advice = f"load it in bfloat16 (--dtype bfloat16, half the bytes) or on a GPU (--device cuda), or {smaller}"
    elif torch.device(device).type == "cpu":
        advice = f"load it on a GPU (--device cuda), or {smaller}"
    else:
        advice = smaller
    require(params * element, f"The model in {where} ({params:,} parameters in {str(dtype).replace('torch.', '')})",
            advice, device)


# ---- activations ---------------------------------------------------------------------------------

def streamed(model) -> bool:
    return bool(getattr(model, "streamed", False))


def _shape(model) -> dict:
    cfg = model.config
    hidden = int(cfg.hidden_size)
    from analysis.archs import adapter_for
    inter = adapter_for(model).mlp_width(cfg)
    from analysis.models.layers import linear_layers
    layers = linear_layers(model)
    return dict(hidden=hidden, inter=int(inter), vocab=int(cfg.vocab_size), layers=len(layers),
                heads=max(layer.value_heads for layer in layers),
                dk=max(layer.key_dim for layer in layers), dv=max(layer.value_dim for layer in layers),
                element=next(model.parameters()).element_size())


def block_work_bytes(model, batch: int, tokens: int, states: bool = True) -> int:
    """One decoder layer's work on [batch, tokens] (its activations and recurrence) plus its input and output
    hidden states: what a streamed run holds besides the layer's weights and the other batches' hidden states."""
    s = _shape(model)
    bt = batch * tokens
    return bt * (10 * s["hidden"] + 3 * s["inter"]) * 4 + recurrence_bytes(batch, tokens, s["heads"], s["dk"], s["dv"],
                                                                          states)


def recurrence_bytes(batch: int, tokens: int, heads: int, dk: int, dv: int, states: bool = True) -> int:
    """One layer's chunked recurrence: q, k, v, o and their chunked copies, intra-chunk weights, and the
    states after every token of one chunk (what state collection reads; states=False: the running state only; a number:
    that many traced positions per chunk, as a strided trace forms)."""
    chunk = min(tokens, CHUNK)
    kept = chunk if states is True else max(1, min(chunk, int(states)))  # an int: the states traced per chunk
    return 4 * batch * heads * (3 * tokens * (2 * dk + 2 * dv) + tokens * chunk + 2 * kept * dk * dv)


def forward_bytes(model, batch: int, tokens: int, logits_copies: int = 2, states: bool = True) -> int:
    """A no-grad forward over [batch, tokens]: logits (model dtype + fp32 copies), one layer's activations
    and recurrence at a time (states: per-token states of a chunk are collected)."""
    s = _shape(model)
    bt = batch * tokens
    if getattr(model, "streamed", False):  # one layer's weights and work; the logits come in chunks of tokens
        return model.largest_unit_bytes + block_work_bytes(model, batch, tokens, states) + batch * s["vocab"] * 4 * 3
    logits = bt * s["vocab"] * (s["element"] + 4 * (logits_copies - 1))
    activations = bt * (8 * s["hidden"] + 3 * s["inter"]) * 4
    return logits + activations + recurrence_bytes(batch, tokens, s["heads"], s["dk"], s["dv"], states)


def training_bytes(model, batch: int, tokens: int) -> int:
    """A forward + backward over [batch, tokens]: every layer's activations are kept for the gradient."""
    s = _shape(model)
    bt = batch * tokens
    per_layer = bt * (16 * s["hidden"] + 4 * s["inter"]) * 4 + recurrence_bytes(batch, tokens, s["heads"],
                                                                               s["dk"], s["dv"])
    return 3 * bt * s["vocab"] * 4 + s["layers"] * per_layer


def fitting_batch(model, batch: int, tokens: int, states: bool = False, gradients: bool = False,
                  reserve: int = 0) -> int:
    """Sequences per forward (or per gradient step): `batch` in memory; streamed, at most `batch` and as many as the
    budget holds (each layer then runs more, smaller batches over the same inputs; at least one, whose size the
    checks judge)."""
    if not getattr(model, "streamed", False):
        return batch
    limit, _ = allowed(next(model.parameters()).device)
    need = (lambda b: streamed_gradient_bytes(model, b, tokens)) if gradients else \
        (lambda b: forward_bytes(model, b, tokens, states=states))
    while batch > 1 and limit is not None and need(batch) + reserve > limit:
        batch //= 2
    return batch


def streamed_gradient_bytes(model, batch: int, tokens: int) -> int:
    """A streamed gradient pass (analysis.models.stream.gradients) on [batch, tokens]: one layer in float32 (and its
    stored dtype), its activations kept for the backward, and the logits of the loss."""
    s = _shape(model)
    fp32_layer = 4 * model.largest_unit_bytes // s["element"]
    return (2 if s["element"] < 4 else 1) * fp32_layer + 2 * block_work_bytes(model, batch, tokens, False) \
        + 3 * batch * tokens * s["vocab"] * 4


def check_forward(model, batch: int, tokens: int, what: str, advice: str = "use fewer tokens or sequences",
                  logits_copies: int = 2, states: bool = True) -> None:
    device = next(model.parameters()).device
    if getattr(model, "streamed", False):  # its weights are one block at a time, its logits chunks of tokens
        name, held = model.largest_unit
        limit, _ = allowed(device)
        if limit is not None and forward_bytes(model, 1, 1, logits_copies, states) > limit:
            advice = (f"no number of tokens fits: the largest block it holds, {name}, is "
                      f"{size_text(held)}; raise --max-memory above {budget.size_text(forward_bytes(model, 1, 1))}")
        require(forward_bytes(model, batch, tokens, logits_copies, states),
                f"{what} ({batch} × {tokens} tokens, one block at a time: its largest block {name} holds "
                f"{size_text(held)}, the work for the tokens the rest)", advice, device)
        return
    require(forward_bytes(model, batch, tokens, logits_copies, states),
            f"{what} ({batch} × {tokens} tokens, logits alone {size_text(batch * tokens * model.config.vocab_size * 4)})",
            advice, device)


def calibration_kept_bytes(model, sequences: int, tokens: int) -> int:
    """What calibration keeps for every layer: the ids and the post-conv q/k activations of every token (fp32)."""
    s = _shape(model)
    n_tokens = sequences * tokens
    return 2 * 8 * n_tokens + 8 * sequences + s["layers"] * n_tokens * s["heads"] * s["dk"] * 4 * 2


def calibration_bytes(model, sequences: int, tokens: int) -> int:
    """Calibration (analysis.shrink.calibration): the ids and their index tensor, every layer's post-conv q and k
    activations kept for all tokens (fp32), one forward of 8 sequences at a time, and the gradient pass
    (an fp32 copy of the model, 4 sequences at a time with gradients)."""
    s = _shape(model)
    n_tokens = sequences * tokens
    ids = 2 * 8 * n_tokens + 8 * sequences
    kept = s["layers"] * n_tokens * s["heads"] * s["dk"] * 4 * 2
    if getattr(model, "streamed", False):  # batches as the budget holds them; gradients one layer at a time
        held = ids + kept
        forward = forward_bytes(model, fitting_batch(model, min(sequences, 8), tokens, reserve=held), tokens,
                                states=False)
        grads = streamed_gradient_bytes(model, fitting_batch(model, min(sequences, 4), tokens, gradients=True,
                                                             reserve=held), tokens)
        return ids + kept + max(forward, grads)
    forward = forward_bytes(model, min(sequences, 8), tokens)
    grads = 4 * sum(p.numel() for p in model.parameters()) + training_bytes(model, min(sequences, 4), tokens)
    return ids + kept + max(forward, grads)


def check_calibration(model, sequences: int, tokens: int) -> None:
    """Checked before a calibration batch is drawn (a recall model's sequences have its task's length)."""
    require(calibration_bytes(model, int(sequences), int(tokens)),
            f"Calibration on {int(sequences):,} × {int(tokens):,} tokens",
            "use fewer calibration sequences or tokens", next(model.parameters()).device)


def recovery_bytes(model, batch: int, tokens: int, teacher=None) -> int:
    """A recovery fine-tune: an fp32 copy of the model, AdamW moments and gradients of (at most) all of it,
    and one training step over [batch, tokens]; with a distillation `teacher`, its no-grad forward (already
    loaded, so its activations and logits only) and the two fp32 softmaxes of the KD term."""
    params = sum(p.numel() for p in model.parameters())
    need = 16 * params + training_bytes(model, batch, tokens)
    if teacher is not None:
        need += forward_bytes(teacher, batch, tokens, logits_copies=2) + 3 * batch * tokens * _shape(model)["vocab"] * 4
    return need


def check_recovery(model, batch: int, tokens: int, teacher=None) -> None:
    what = "with gradients" + (" and the unpruned teacher's forward" if teacher is not None else "")
    require(recovery_bytes(model, int(batch), int(tokens), teacher),
            f"Recovery fine-tuning on batches of {int(batch):,} × {int(tokens):,} tokens {what}",
            "use a smaller batch or shorter sequences", next(model.parameters()).device)


def check_whole_model_training(model, what: str, batch: int, tokens: int) -> None:
    """Recovery and training need gradients through the whole model at once, with optimizer state: they are never
    streamed one block at a time. A streamed model, or one whose training would not fit, gets one sentence."""
    params = sum(p.numel() for p in model.parameters())
    need = 16 * params + training_bytes(model, batch, tokens)
    limit, how = allowed(next(model.parameters()).device)
    if getattr(model, "streamed", False) or (limit is not None and need > limit):
        raise AnalysisError(f"{what} trains with gradients through the whole model at once, so it is never run one "
                            f"block at a time, and it needs about {size_text(need)} ({params:,} parameters with "
                            f"their gradients and optimizer state, batches of {batch} × {tokens} tokens), more than "
                            f"{how}; raise --max-memory above {budget.size_text(need)}, load the model in bfloat16 "
                            "(--dtype bfloat16) if that is enough, or use a GPU (--device cuda).")


def check_kernel(batch: int, tokens: int, heads: int, dk: int, dv: int, device) -> None:
    require(recurrence_bytes(batch, tokens, heads, dk, dv),
            f"Timing the recurrence at batch {batch} × {tokens} tokens × {heads} heads (dk {dk}, dv {dv})",
            "use fewer tokens or a smaller batch", device)


def check_noise_samples(samples: int, snrs: int, dk: int, dv: int, keys: int = 1, batch: int = 1) -> None:
    """The Monte Carlo holds, per key, float64 noise for every sample and SNR (noise.monte_carlo_retrieval_error
    works key by key beyond that), plus the states and four results per key and SNR for `keys` × `batch` keys."""
    per_key = 8 * (dk * dv + samples * dk + 3 * snrs * samples * (dk + dv))
    need = per_key + 8 * batch * dk * dv + 32 * batch * max(1, keys) * snrs
    require(need, f"The Monte Carlo with {samples:,} samples × {snrs:,} SNRs per key (dk {dk}, dv {dv})",
            "use fewer --samples or --snr values", "cpu")
