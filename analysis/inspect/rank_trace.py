"""Rank utilization u(S_t) = ‖S_t‖_F² / (s1(S_t)² · min(dk, dv)) at EVERY token, without any SVD.

The recurrence inputs of each layer are intercepted during one forward pass and handed to
`analysis.linalg.spectral_tracker`, which steps the state token by token (the same recurrence as the model,
decay gate included) and tracks s1² with a warm-started Rayleigh–Ritz iteration. States are never
stored. Ritz values never exceed s1², so the tracker can only over-estimate u; `tol` is the error of u
at which it stops, by residual-based estimates (tests and the benchmark compare against numpy's SVD).

The tracker needs each token to scale the state by one number and add a rank-one write (its Gram matrix then
changes by a rank-two update); the recurrence says whether it does (`Recurrence.tracker_inputs`). A decay per key
channel (KDA, GLA) or a diagonal-plus-low-rank transition (RWKV-7) does not; those layers' states come from the
recurrence itself, chunk by chunk, and s1 from an SVD of each (exact, slower; never more than one chunk's states at
a time).
"""
from __future__ import annotations

import torch

from analysis.runtime.backend import observe_recurrences, run_recurrence
from analysis.runtime.recurrences import RecurrenceInputs
from analysis.errors import AnalysisError
from analysis.models.load import attention_layers
from analysis.linalg.spectral_tracker import DEFAULT_TOL, track_top_singular


def utilization_trace(r: RecurrenceInputs, tol: float = DEFAULT_TOL, threads: int | None = None
                      ) -> dict[str, torch.Tensor]:
    """u, ‖S_t‖_F², s1² after every token: tensors [B, H, T]; plus the mean Rayleigh–Ritz steps per token."""
    if r.initial_state is not None or r.cu_seqlens is not None:
        raise AnalysisError("The dense rank trace needs whole, unpadded sequences without a prior cache.")
    B, T, H, dk = r.k.shape
    dv = r.v.shape[-1]
    tracked = r.recurrence.tracker_inputs(r)
    if tracked is None:
        return _svd_trace(r)
    k, v, beta, decay, correction = tracked
    fro2, top2, steps = track_top_singular(k, v, beta, decay, tol=tol, threads=threads or torch.get_num_threads(),
                                           correction=correction)
    fro2, top2 = torch.from_numpy(fro2), torch.from_numpy(top2)
    u = torch.where(top2 > 0, fro2 / top2.clamp(min=1e-300), fro2 * 0) / min(dk, dv)  # 0 for a zero state
    return {"rank_utilization": u.float(), "fro_norm_sq": fro2.float(), "spectral_norm_sq": top2.float(),
            "mean_ritz_steps": torch.tensor(float(steps.mean()))}


class _EveryState:
    """A StateSink that wants every token and keeps only ‖S_t‖_F² and s1(S_t)² (an SVD of each state)."""

    def __init__(self, batch: int, heads: int, tokens: int):
        self.fro2, self.top2 = torch.zeros(batch, heads, tokens), torch.zeros(batch, heads, tokens)

    def wanted(self, start: int, stop: int) -> torch.Tensor:
        return torch.arange(stop - start)

    def take(self, start: int, offsets: torch.Tensor, states: torch.Tensor) -> None:
        at = start + offsets
        self.fro2[:, :, at] = states.square().sum((-1, -2)).float().cpu()
        self.top2[:, :, at] = torch.linalg.matrix_norm(states.float(), ord=2).square().cpu()


def _svd_trace(r: RecurrenceInputs) -> dict[str, torch.Tensor]:
    """utilization_trace for transitions the tracker cannot follow: every state formed by the recurrence, its SVD."""
    B, T, H, dk = r.k.shape
    sink = _EveryState(B, H, T)
    run_recurrence(r, sink)
    fro2, top2 = sink.fro2.double(), sink.top2.double()
    u = torch.where(top2 > 0, fro2 / top2.clamp(min=1e-300), fro2 * 0) / min(dk, r.v.shape[-1])
    return {"rank_utilization": u.float(), "fro_norm_sq": fro2.float(), "spectral_norm_sq": top2.float(),
            "mean_ritz_steps": torch.tensor(float("nan")), "exact": True}


def collect_utilization_trace(model, input_ids: torch.Tensor, progress=None, **kwargs) -> list[dict[str, torch.Tensor]]:
    """Run the model once and return, per layer, the dense utilization trace of `utilization_trace`
    (progress(layers_done, layers) after each layer)."""
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise AnalysisError("input_ids must be a non-empty [batch, tokens] tensor of token ids.")
    results: list[dict] = []
    n_layers = len(attention_layers(model))

    def observe(r) -> None:
        results.append(utilization_trace(r, **kwargs))
        if progress:
            progress(len(results), n_layers)

    with torch.no_grad(), observe_recurrences(observe):
        model(input_ids.to(next(model.parameters()).device), use_cache=False)
    if len(results) != len(attention_layers(model)):
        raise AnalysisError("Expected one recurrence per layer; this architecture is not supported.")
    return results
