"""Route fla's Triton entry points by device: CPU tensors take `analysis.runtime.cpu_ops`, CUDA tensors keep fla.

fla 0.6.0 cannot run a single op on CPU, so `install()` wraps, once per process, fla's shared modules
(ShortConvolution, RMSNorm, FusedRMSNormGated, LayerNorm, GroupNorm and the fused cross-entropy: fla dispatches none
of them above its fwd/bwd kernel pairs), registers the project's CPU ops where fla dispatches them itself
(analysis.runtime.fla_dispatch: the activations, SwiGLU, the l2 norm), guards every other Triton launch
(analysis.runtime.triton_guard), and each family's
adapter routes its own recurrence entry points with `route_recurrence(module, names, recurrence)` (`by_device`
with the recurrence's `prepare`, analysis.runtime.recurrences; `conv_by_device` for a fused-qkv conv). Each wrapper
checks the tensor's device and calls fla's untouched original for CUDA. An optional observer sees the prepared recurrence inputs on
both devices, which is how `analysis.inspect.states` collects per-token states: an observer that returns a
`StateSink` gets the states at the positions it asks for, then `finish(final_state)`. On CPU they come
from the forward's own chunked recurrence (one pass); on CUDA, where fla's kernel runs the forward and
keeps no per-token state, from a torch replay of the same inputs on the GPU.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect
from typing import Callable

import torch

from analysis.runtime import fla_dispatch, triton_guard
from analysis.runtime.cpu_ops import conv as conv_ops
from analysis.runtime.cpu_ops import norms
from analysis.runtime.cpu_ops.delta_rule import StateSink
from analysis.runtime.recurrences import RecurrenceInputs

_observer: contextvars.ContextVar[Callable[[RecurrenceInputs], object] | None] = \
    contextvars.ContextVar("recurrence_observer", default=None)


@contextlib.contextmanager
def observe_recurrences(callback: Callable[[RecurrenceInputs], object]):
    """Call `callback(inputs)` for every recurrence op a forward pass runs (CPU or CUDA); when it returns a
    StateSink (with `finish(final_state)`), that sink receives the states it asks for."""
    token = _observer.set(callback)
    try:
        yield
    finally:
        _observer.reset(token)


def observing() -> bool:
    """Whether an observer (observe_recurrences) is collecting in this context."""
    return _observer.get() is not None


PER_TOKEN = ("q", "k", "v", "beta", "g", "a", "b")   # RecurrenceInputs fields with a token axis (dim 1)


def run_recurrence(r: RecurrenceInputs, sink: StateSink | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked recurrence over prepared inputs; packed sequences (cu_seqlens) run one by one (no sink)."""
    if r.cu_seqlens is None:
        return r.recurrence.chunked(r, sink)
    if sink is not None:
        raise ValueError("per-token states of packed sequences (cu_seqlens) are not supported")
    outs, finals = [], []
    bounds = r.cu_seqlens.tolist()
    for n, (s, e) in enumerate(zip(bounds[:-1], bounds[1:])):
        cut = {f: getattr(r, f)[:, s:e] for f in PER_TOKEN if getattr(r, f) is not None}
        h0 = None if r.initial_state is None else r.initial_state[n:n + 1]
        o, S = r.recurrence.chunked(dataclasses.replace(r, **cut, initial_state=h0, cu_seqlens=None))
        outs.append(o)
        finals.append(S)
    return torch.cat(outs, dim=1), torch.cat(finals)


def _torch_recurrence(prepare_inputs, bound: dict):
    r = prepare_inputs(**bound)
    sink = _notify(r)
    o, S = run_recurrence(r, sink)  # the observer's states come from this very pass: no replay on CPU
    if sink is not None:
        sink.finish(S.detach())
    if bound.get("state_v_first"):
        S = S.transpose(-1, -2)
    return o.to(bound["v"].dtype), (S.contiguous() if bound.get("output_final_state") else None)


def _notify(r: RecurrenceInputs) -> StateSink | None:
    """Tell the observer (if any); returns the StateSink it asks to be fed, if it returned one."""
    callback = _observer.get()
    if callback is None:
        return None
    with torch.no_grad():
        sink = callback(dataclasses.replace(r, **{f: getattr(r, f).detach() for f in r.__dataclass_fields__
                                                  if torch.is_tensor(getattr(r, f))}))
    return sink if hasattr(sink, "wanted") else None


def _replay(r: RecurrenceInputs, sink: StateSink) -> None:
    """CUDA: fla's kernel keeps no per-token state, so the sink's states come from a torch replay of its inputs."""
    with torch.no_grad():
        _, S = run_recurrence(r, sink)
    sink.finish(S)


def observed(r: RecurrenceInputs, compute: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Tell the observer about prepared inputs a family's own routing formed (not through `by_device`).
    compute=True (CPU): run the torch recurrence, feeding the observer's sink, and return (o, final state);
    compute=False (the family's CUDA kernel runs the forward): replay for the sink only when it wants states."""
    sink = _notify(r)
    if not compute:
        if sink is not None:
            _replay(r, sink)
        return None
    o, S = run_recurrence(r, sink)
    if sink is not None:
        sink.finish(S.detach())
    return o, S


def by_device(fla_op, prepare_inputs):
    """A recurrence op that keeps fla's kernel on CUDA (telling the observer) and runs torch elsewhere.

    `prepare_inputs(**arguments)` forms the RecurrenceInputs from the op's own arguments: the `prepare` of the
    recurrence the op runs (analysis.runtime.recurrences)."""
    signature = inspect.signature(fla_op)

    def op(*args, **kwargs):
        bound = signature.bind(*args, **kwargs).arguments
        bound.update(bound.pop("kwargs", {}))
        if bound["v"].is_cuda:
            if _observer.get() is not None:
                r = prepare_inputs(**bound)
                sink = _notify(r)
                if sink is not None:
                    _replay(r, sink)
            return fla_op(*args, **kwargs)
        return _torch_recurrence(prepare_inputs, bound)
    op.__wrapped__ = fla_op
    op.__name__ = fla_op.__name__
    return op


def wrap_method(cls, name, torch_impl):
    """Patch `cls.name` so CPU inputs take `torch_impl(self, x, ...)` and CUDA ones the original (idempotent)."""
    original = getattr(cls, name)
    if getattr(original, "_analysis_wrapped", False):
        return

    def method(self, x, *args, **kwargs):
        return original(self, x, *args, **kwargs) if x.is_cuda else torch_impl(self, x, *args, **kwargs)
    method._analysis_wrapped = True
    method.__wrapped__ = original
    setattr(cls, name, method)


def _short_conv(self, x, residual=None, mask=None, cache=None, output_final_state=False, cu_seqlens=None,
                **_unused):
    if mask is not None:
        x = x * mask.unsqueeze(-1)
    y, final = conv_ops.causal_conv1d(x, self.weight[:, 0], self.bias, residual, cache, True,
                                      self.activation, cu_seqlens)
    if cache is not None and not torch.is_grad_enabled() and x.shape[1] == 1:
        cache.copy_(final)  # fla's single-token decode updates the cache in place; mirror it
    return y, (final if output_final_state else None)


def conv_by_device(fla_conv):
    """fla's functional causal_conv1d on CUDA, the torch conv elsewhere (a family's fused-qkv conv path)."""
    def conv(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
             activation=None, backend="triton", cu_seqlens=None, **kwargs):
        if x.is_cuda:
            return fla_conv(x, weight, bias, residual, initial_state, output_final_state, activation, backend,
                            cu_seqlens, **kwargs)
        return conv_ops.causal_conv1d(x, weight, bias, residual, initial_state, output_final_state, activation,
                                      cu_seqlens)
    conv.__wrapped__ = fla_conv
    return conv


def torch_on_cpu(torch_fn):
    """A `route` wrap for a plain fla function with a torch twin taking the same arguments: fla's function when its
    first tensor argument is on CUDA, `torch_fn` elsewhere."""
    def wrap(fla_fn):
        def fn(*args, **kwargs):
            first = next(a for a in (*args, *kwargs.values()) if torch.is_tensor(a))
            return fla_fn(*args, **kwargs) if first.is_cuda else torch_fn(*args, **kwargs)
        fn.__wrapped__ = fla_fn
        fn.__name__ = getattr(fla_fn, "__name__", "routed")
        return fn
    return wrap


def route(module, names, wrap) -> None:
    """Replace the entry points `names` that a layer file looks up as module globals at call time by their
    device-routed versions (`wrap`), once (idempotent)."""
    for name in names:
        current = getattr(module, name)
        if getattr(current, "_analysis_routed", False):
            continue
        routed = wrap(current)
        routed._analysis_routed = True
        setattr(module, name, routed)


def route_recurrence(module, names, recurrence) -> None:
    """`route` for recurrence entry points taking `recurrence`'s op arguments: CUDA keeps fla's op, CPU runs ours."""
    route(module, names, lambda op: by_device(op, recurrence.prepare))


# --- recurrence entry points fla dispatches itself: through fla's registry (analysis.runtime.fla_dispatch) ----------

_passing = contextvars.ContextVar("fla_dispatch_passing", default=False)


def recurrence_verifier(*args, **kwargs) -> tuple[bool, str | None]:
    """CPU tensors, or CUDA ones while an observer collects states (analysis.runtime.backend.observe_recurrences):
    the project's route tells the observer, then hands the call back to fla (`_passing`), which picks as before."""
    if _passing.get():
        return False, "handed back to fla"
    accepted, why = fla_dispatch.on_cpu(*args, **kwargs)
    return (True, None) if accepted or observing() else (False, why)


def _handed_back(public_fn):
    """`public_fn` (fla's dispatched entry point) called with the project's backend stepping aside."""
    def call(*args, **kwargs):
        token = _passing.set(True)
        try:
            return public_fn(*args, **kwargs)
        finally:
            _passing.reset(token)
    call.__wrapped__ = public_fn   # inspect.signature (backend.by_device binds the arguments) follows it
    call.__name__ = public_fn.__name__
    return call


def register_recurrence(public_fn, prepare, operation: str | None = None) -> bool:
    """Route fla's recurrence entry point `public_fn` through its dispatch: CPU calls take the project's chunked
    recurrence (`backend.by_device` with `prepare`), CUDA calls fla's kernel (the observer told). `operation`: the
    registry's name for an operation-level `@dispatch('op')`, None for a function-level `@dispatch`. False where
    dispatch is off: the caller patches the layer's module global instead."""
    if not fla_dispatch.dispatch_enabled():
        return False
    implementation = by_device(_handed_back(public_fn), prepare)
    if operation is None:
        fla_dispatch.register_function(public_fn, implementation, verifier=recurrence_verifier)
    else:
        fla_dispatch.register_operation(operation, public_fn.__name__, implementation, recurrence_verifier)
        fla_dispatch.registered[f"{public_fn.__module__}.{public_fn.__name__}"] = "dispatch"
    return True


def route_entry_points(module, names, recurrence, dispatched: dict[str, str | None]) -> None:
    """A layer file's recurrence entry points `names`: those fla dispatches (`dispatched`: name -> operation, None
    for a function-level dispatch) through fla's registry, the rest patched (`backend.route_recurrence`)."""
    patched = []
    for name in names:
        fn = getattr(module, name)
        fn = fn.__wrapped__ if getattr(fn, "_analysis_routed", False) else fn
        if not (name in dispatched and register_recurrence(fn, recurrence.prepare, dispatched[name])):
            patched.append(name)
    route_recurrence(module, patched, recurrence)


def _patch_global(module, name, cpu_fn) -> None:
    """fla_dispatch's fallback where fla's dispatch is off: the module global takes `cpu_fn` for CPU tensors."""
    route(module, (name,), torch_on_cpu(cpu_fn))


def _rms(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    return norms.rms_norm(x, self.weight, self.bias, residual, self.eps, prenorm, residual_in_fp32)


def _rms_gated(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
    return norms.rms_norm(x, self.weight, self.bias, residual, self.eps, prenorm, residual_in_fp32,
                          gate=g, activation=self.activation)


def _layer_norm(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    return norms.rms_norm(x, self.weight, self.bias, residual, self.eps, prenorm, residual_in_fp32, centred=True)


def _group_norm(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    return norms.rms_norm(x, self.weight, self.bias, residual, self.eps, prenorm, residual_in_fp32,
                          centred=not self.is_rms_norm, groups=self.num_groups)


def _cross_entropy(self, input, target):
    if self.logit_softcapping or self.return_z_loss:
        raise NotImplementedError("logit soft-capping and z-loss return are not supported on CPU")
    return norms.cross_entropy(input, target, self.ignore_index, self.label_smoothing, self.logit_scale,
                               self.lse_square_scale, self.reduction)


def _linear_cross_entropy(self, x, target, weight, bias=None):
    """fla's FusedLinearCrossEntropyLoss (config fuse_linear_cross_entropy; the loss of a forward with labels): the
    output head, then _cross_entropy's loss, L2-warped as fla's L2Wrap where the config asks (use_l2warp)."""
    if self.logit_softcapping:
        raise NotImplementedError("logit soft-capping is not supported on CPU")
    from fla.modules.l2warp import l2_warp
    logits = torch.nn.functional.linear(x.reshape(-1, x.shape[-1]), weight, bias)
    loss = norms.cross_entropy(logits, target.reshape(-1), self.ignore_index, self.label_smoothing,
                               self.logit_scale, 0.0, self.reduction)
    return l2_warp(loss, logits[None], self.l2_penalty_factor) if self.use_l2warp else loss


_installed = False


def install() -> None:
    """Patch fla's shared modules once per process (idempotent); each family's adapter routes its own
    recurrence entry points (`route_recurrence`). Imports fla, so call it lazily."""
    global _installed
    if _installed:
        return
    import fla  # noqa: F401  (registers the model types; needs triton installed)
    from fla.modules import FusedCrossEntropyLoss, FusedRMSNormGated, GroupNorm, LayerNorm, RMSNorm, ShortConvolution

    if not getattr(fla, "__all__", None):
        raise ImportError("fla imported without its models: install triton (fla's [cpu] extra)")
    wrap_method(ShortConvolution, "forward", _short_conv)
    wrap_method(RMSNorm, "forward", _rms)
    wrap_method(FusedRMSNormGated, "forward", _rms_gated)
    wrap_method(LayerNorm, "forward", _layer_norm)
    wrap_method(GroupNorm, "forward", _group_norm)
    wrap_method(FusedCrossEntropyLoss, "forward", _cross_entropy)
    from fla.modules import FusedLinearCrossEntropyLoss
    wrap_method(FusedLinearCrossEntropyLoss, "forward", _linear_cross_entropy)
    fla_dispatch.install(patch=_patch_global)   # fla's dispatched activations (SwiGLU, swish, ...) and l2 norm, through fla's registry
    triton_guard.install()   # anything the routing misses ends in one sentence, not inside Triton
    _installed = True
