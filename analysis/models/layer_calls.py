"""Calling a model's decoder layers differently for a while: the one helper that both the layer-prefix reuse
(analysis.models.prefix) and the streamed runner (analysis.models.stream.runner) use to put a stand-in in place
of each layer's forward (a recorder, a replay, a stub returning kept outputs) and take it away again."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def layers_replaced(layers, forward_of):
    """Each layer's forward replaced by forward_of(index) while inside (an instance attribute, so hooks still fire
    and the class's forward comes back on the way out, by return or by exception)."""
    for i, layer in enumerate(layers):
        layer.forward = forward_of(i)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward
