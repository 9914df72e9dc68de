"""Per-layer, per-head recurrent states of a forward pass, with metrics computed as the states stream by.

The model runs normally (torch path on CPU, fla's kernels on CUDA). An observer on the recurrence op
receives each layer's prepared inputs and returns a per-layer collector (a StateSink): the chunked
recurrence forms the states at the requested positions only and hands them over chunk by chunk — on
CPU from the forward's own recurrence, on CUDA from a torch replay of the kernel's inputs. By default
only their spectral metrics are kept (computed in batches of at most METRIC_BATCH states), so memory
stays bounded by one batch of states per layer. States are K-first
[dk, dv] for both models (Gated DeltaNet's V-first cache is transposed) and include the decay gate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from analysis.runtime.backend import observe_recurrences
from analysis.errors import AnalysisError
from analysis.models.forward import is_streamed, run_batches
from analysis.models.load import attention_layers
from analysis.linalg.rank import spectral_metrics


@dataclass
class LayerTrace:
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [B, H, P] ([B, H, P, m] for spectra)
    final_state: torch.Tensor | None = None                          # [B, H, dk, dv]
    states: torch.Tensor | None = None                               # [B, H, P, dk, dv] when kept
    keys: torch.Tensor | None = None                                 # [B, H, n, dk] last keys, as the kernel sees them
    every_token: dict[str, torch.Tensor] | None = None               # rank_trace.utilization_trace, if asked


@dataclass
class StateTrace:
    positions: list[int]        # state after token t (0-based), t in positions
    layers: list[LayerTrace]
    tokens: int
    batch: int
    logits: torch.Tensor | None = None

    def metric(self, name: str) -> torch.Tensor:
        """[L, B, H, P] for a scalar metric; H is the most heads of any layer, and a layer with fewer (a head
        prune) has NaN for the heads it lacks (shown as gaps)."""
        values = [layer.metrics[name] for layer in self.layers]
        heads = max(v.shape[1] for v in values)
        return torch.stack([torch.nn.functional.pad(v, (0, 0, 0, heads - v.shape[1]), value=float("nan"))
                            for v in values])


def select_positions(n_tokens: int, stride: int = 1, positions=None) -> list[int]:
    """Every `stride`-th token (0, stride, 2·stride, …) plus the last, or an explicit list."""
    if n_tokens < 1:
        raise AnalysisError("No tokens to analyse; give a text with at least one token.")
    if positions is not None:
        chosen = sorted({int(p) for p in positions})
        if not chosen or chosen[0] < 0 or chosen[-1] >= n_tokens:
            raise AnalysisError(f"Positions must lie in [0, {n_tokens - 1}] for {n_tokens} tokens.")
        return chosen
    if int(stride) != stride or stride < 1:
        raise AnalysisError(f"Stride must be a whole number ≥ 1, got {stride}.")
    return sorted(set(range(0, n_tokens, int(stride))) | {n_tokens - 1})


METRIC_BATCH = 512  # states per spectral_metrics call: big enough to batch well, 32 MB at 128×128 fp32


class _LayerCollector:
    """One layer's StateSink: asks for the chosen positions, keeps their metrics (and states if asked)."""

    def __init__(self, positions: list[int], keep_states: bool, compute_metrics: bool, tau: float,
                 keep_metrics: tuple[str, ...] | None = None):
        self.positions = torch.tensor(positions, dtype=torch.long)
        self.keep_states, self.compute_metrics, self.tau = keep_states, compute_metrics, tau
        self.keep_metrics = keep_metrics
        self.metric_parts: list[dict] = []
        self.state_parts: list[torch.Tensor] = []
        self.pending: list[torch.Tensor] = []   # states whose metrics are not computed yet
        self.pending_count = 0
        self.final = None
        self.keys = None
        self.every_token = None

    def wanted(self, start: int, stop: int) -> torch.Tensor:
        lo, hi = torch.searchsorted(self.positions, torch.tensor([start, stop])).tolist()
        return self.positions[lo:hi] - start

    def take(self, start: int, offsets: torch.Tensor, states: torch.Tensor) -> None:
        if self.compute_metrics:
            self.pending.append(states)
            self.pending_count += states.shape[:3].numel()
            if self.pending_count >= METRIC_BATCH:
                self._flush()
        if self.keep_states:
            self.state_parts.append(states.cpu())

    def finish(self, final_state: torch.Tensor) -> None:
        self.final = final_state
        self._flush()

    def _flush(self) -> None:
        """The pending states' metrics, at most METRIC_BATCH states per call (whatever the batch of sequences), so
        the float64 copies and the eigensolver's work stay one METRIC_BATCH however many states a chunk hands over."""
        if self.pending:
            chosen = torch.cat(self.pending, dim=2) if len(self.pending) > 1 else self.pending[0]
            self.pending, self.pending_count = [], 0
            step = max(1, METRIC_BATCH // chosen.shape[:2].numel())   # positions per call
            for at in range(0, chosen.shape[2], step):
                self.metric_parts.append({k: v.cpu() for k, v in
                                          spectral_metrics(chosen[:, :, at:at + step], tau=self.tau).items()
                                          if self.keep_metrics is None or k in self.keep_metrics})

    def result(self) -> LayerTrace:
        metrics = {k: torch.cat([p[k] for p in self.metric_parts], dim=2) for k in self.metric_parts[0]} \
            if self.metric_parts else {}
        states = torch.cat(self.state_parts, dim=2) if self.state_parts else None
        final = None if self.final is None else self.final.cpu()
        return LayerTrace(metrics=metrics, final_state=final, states=states, keys=self.keys,
                          every_token=self.every_token)


def collect_states(model, input_ids: torch.Tensor, *, stride: int = 1, positions=None,
                   keep_states: bool = False, compute_metrics: bool = True, tau: float = 1e-3,
                   keep_keys: int = 0, every_token: bool = False, progress=None, batch: int | None = None,
                   keep_metrics: tuple[str, ...] | None = None) -> StateTrace:
    """Run `model` on equal-length sequences `input_ids` [B, T] and trace every layer's states.

    every_token: also the rank utilization after every token (analysis.inspect.rank_trace), from the same pass.
    progress(layers_done, layers) is called as each layer's states are traced.
    batch: sequences per forward (None: all at once). A streamed model reads each layer once for all the batches,
    so a batch that fits the memory budget costs no extra reads; the trace is the same as with one batch.
    keep_metrics: the names of the metrics kept (None: all of them, the singular values included).
    """
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise AnalysisError("input_ids must be a non-empty [batch, tokens] tensor of token ids.")
    n_seq, n_tokens = input_ids.shape
    chosen = select_positions(n_tokens, stride, positions)
    attns = attention_layers(model)
    if every_token:  # numba loads only when asked for
        from analysis.inspect.rank_trace import utilization_trace
    batches = list(input_ids.split(batch or n_seq))
    if len(batches) > 1 and every_token:
        raise AnalysisError("The every-token trace runs all sequences in one batch; leave out the batch size.")
    # collectors[layer][m]: each layer runs each batch once, in batch order, in memory and streamed alike
    collectors = [[_LayerCollector(chosen, keep_states, compute_metrics, tau, keep_metrics) for _ in batches]
                  for _ in attns]
    calls = [0] * len(attns)
    calling = {"layer": None, "batch": None}

    def pre_hook(i):
        def hook(_m, _a):
            calling.update(layer=i, batch=min(calls[i], len(batches) - 1))  # one batch: every call is batch 0
            calls[i] += 1
        return hook
    hooks = [attn.register_forward_pre_hook(pre_hook(i)) for i, attn in enumerate(attns)]

    def observe(inputs) -> _LayerCollector:
        layer = calling["layer"]
        collector = collectors[layer][calling["batch"]]
        if inputs.initial_state is not None or inputs.cu_seqlens is not None:
            raise AnalysisError("State collection needs whole, unpadded sequences without a prior cache.")
        if keep_keys:
            collector.keys = inputs.k[:, -keep_keys:].transpose(1, 2).cpu()
        if every_token:
            collector.every_token = utilization_trace(inputs)
        if progress and calling["batch"] == len(batches) - 1:
            progress(layer + 1, len(attns))
        return collector  # the recurrence feeds it the requested states, then the final state

    parts = []  # a streamed model skips its LM head: the states are what is asked for
    keep_logits = None if is_streamed(model) else (lambda _i, _first, logits: parts.append(logits))
    try:
        with torch.no_grad(), observe_recurrences(observe):
            run_batches(model, batches, on_logits=keep_logits)
    finally:
        for h in hooks:
            h.remove()
    return StateTrace(positions=chosen, layers=[_joined([c.result() for c in row]) for row in collectors],
                      tokens=n_tokens, batch=n_seq, logits=torch.cat(parts) if parts else None)


def _joined(traces: list[LayerTrace]) -> LayerTrace:
    """One layer's traces of consecutive batches as one trace (every tensor is batch-first)."""
    if len(traces) == 1:
        return traces[0]

    def cat(values):
        return None if values[0] is None else torch.cat(values)
    first = traces[0]
    return LayerTrace(metrics={k: torch.cat([t.metrics[k] for t in traces]) for k in first.metrics},
                      final_state=cat([t.final_state for t in traces]), states=cat([t.states for t in traces]),
                      keys=cat([t.keys for t in traces]), every_token=None)
