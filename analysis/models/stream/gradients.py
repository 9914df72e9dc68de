"""Gradients of a streamed model, one decoder layer at a time (the Taylor scores' calibration pass).

What an in-memory pass computes on an fp32 copy of the whole model — ∇ of Σ over batches of (the batch's mean
next-token loss × its size) w.r.t. chosen parameters — is computed here with one layer in memory at a time: a
forward keeps every layer's input (spilled to a temporary file when they do not fit), the model's own tail turns
the last hidden states into the loss and its gradient, and the layers are then run again in reverse, each on its
kept inputs with gradients on, handing the input's gradient to the layer before. Every layer's weights are cast
to float32 after they are read, as `copy.deepcopy(model).float()` does; each parameter's gradient accumulates over
the batches in the same order as in memory.
"""
from __future__ import annotations

import contextlib

import torch

from analysis.errors import AnalysisError
from analysis.models.stream.hidden import HiddenStates
from analysis.models.layer_calls import layers_replaced
from analysis.models.stream.runner import Runner, with_hidden
from analysis.runtime.cancel import check


@contextlib.contextmanager
def _float32(skeleton, names: set):
    """Units materialise as float32 with gradients on `names` only; the real buffers are float32 meanwhile."""
    buffers = list(skeleton.model.named_non_persistent_buffers())
    owners = []
    for name, buf in buffers:
        parent, _, leaf = name.rpartition(".")
        owner = skeleton.model.get_submodule(parent)
        owners.append((owner, leaf, buf))
        if buf.is_floating_point():
            owner._buffers[leaf] = buf.float()
    skeleton.cast, skeleton.grad_names = torch.float32, set(names)
    try:
        yield
    finally:
        skeleton.cast, skeleton.grad_names = None, None
        for owner, leaf, buf in owners:
            owner._buffers[leaf] = buf


def parameter_gradients(model, batches, names: list[str], cancel=None, hidden_limit: float = 0) -> dict:
    """{full parameter name: gradient (float32, CPU)} for `names`, over `batches` of token ids [b, T]."""
    sk = model.skeleton
    if model.shape.carried:
        raise AnalysisError("Gradient scores of a model read one block at a time are computed layer by layer, and "
                            "this model's layers hand a second tensor on to each other (values carried from the "
                            "first layer), whose gradient that pass does not follow yet; pick another strategy or raise "
                            "--max-memory so that the model loads whole.")
    runner = Runner(sk, model.shape, hidden_limit, 0)
    layers, units = sk.layers, sk.block_units()
    wanted = set(names)
    grads: dict[str, torch.Tensor] = {}
    with sk.lock, _float32(sk, wanted), contextlib.ExitStack() as stack:
        with torch.no_grad(), sk.rest_on_demand(keep=True):
            starts, records = runner.capture(batches, "cpu")
        sizes = [h.numel() * 4 for h, *_ in starts] * (len(layers) + 1)
        store = HiddenStates(sizes, spill=sum(sizes) > hidden_limit)
        stack.callback(store.close)
        count = len(batches)
        for m, (h, *_) in enumerate(starts):
            store.put(m, h)
        del starts
        with torch.no_grad():  # forward: keep every layer's input
            for i, (layer, unit) in enumerate(zip(layers, units)):
                check(cancel)
                with sk.materialized(unit):
                    for m, calls in enumerate(records):
                        args, kwargs = with_hidden(*calls[i], store.get(i * count + m))
                        store.put((i + 1) * count + m, model.shape.first(layer(*args, **kwargs)))
        upstream = []
        replay = {}
        with sk.rest_on_demand(keep=True), \
                layers_replaced(layers, lambda _i: lambda *a, **k: model.shape.wrap(replay["h"])):
            for m, ids in enumerate(batches):  # the model's own loss on the last hidden states
                check(cancel)
                hidden = store.get(len(layers) * count + m).detach().requires_grad_(True)
                replay["h"] = hidden
                out = sk.model(inputs_embeds=torch.zeros_like(hidden), labels=ids, use_cache=False)
                (out.loss * ids.shape[0]).backward()
                upstream.append(hidden.grad)
        for i in reversed(range(len(layers))):  # backward, one layer at a time
            check(cancel)
            with sk.materialized(units[i]):
                for m, calls in enumerate(records):
                    x = store.get(i * count + m).detach().requires_grad_(True)
                    args, kwargs = with_hidden(*calls[i], x)
                    torch.autograd.backward(model.shape.first(layers[i](*args, **kwargs)), upstream[m])
                    upstream[m] = x.grad
                for module, attr, is_param, _meta, full in units[i].slots:
                    if full in wanted and is_param and module._parameters[attr].grad is not None:
                        grads[full] = module._parameters[attr].grad.detach().clone()
    return grads
