"""Calibration statistics for channel importance, gathered from train-split batches only (recall models:
synthetic recall sequences).

One no-grad forward pass records, per layer: the feature-wise RMS of the attention input (Wanda's
‖X_j‖), the post-convolution query/key activations that enter the recurrence (pre-l2norm, as DRRQR
uses them; taken from the recurrence op's inputs, so Gated DeltaNet's fused-conv path is covered),
and the covariance of the l2-normalised keys per key head (PCA; grouped value heads undone). Gradients of
the parameters holding the q/k rows (Taylor scores; the adapter's `channel_rows`) come from a separate pass
on a private copy of the model, only when a strategy asks for them.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from analysis.data import inputs
from analysis.runtime.backend import observe_recurrences
from analysis.runtime.cancel import check
from analysis.errors import AnalysisError
from analysis.models import limits
from analysis.models.forward import is_streamed, run_batches
from analysis.models.channel_group import qk_rows
from analysis.models.layers import attention_layers, linear_layers

DRRQR_ROWS = 5000  # sampled rows of [A_q; A_k] per head, as in the reference method


@dataclass
class LayerStats:
    input_rms: torch.Tensor            # [hidden]
    q_acts: torch.Tensor               # [N, H, dk] post-conv, pre-l2norm
    k_acts: torch.Tensor               # [N, H, dk]
    key_cov: torch.Tensor              # [H, dk, dk] covariance of l2-normalised keys (centred)
    key_mean: torch.Tensor             # [H, dk]


@dataclass(frozen=True)
class CalibrationSettings:
    """The calibration a strategy reads, core and dashboard alike: `sequences` windows of `tokens` train-split
    tokens (a recall model: synthetic sequences of its task's length) drawn with `seed`."""
    sequences: int = 16
    tokens: int = 256
    seed: int = 0

    def __iter__(self):  # (sequences, tokens, seed): job keys list it
        return iter((self.sequences, self.tokens, self.seed))

    def calibrate(self, model, tokenizer, cancel=None) -> Calibration:
        return calibrate(model, tokenizer, self.sequences, self.tokens, self.seed, cancel=cancel)

    def check_size(self, model) -> None:
        check_size(model, self.sequences, self.tokens)


@dataclass
class Calibration:
    input_ids: torch.Tensor            # [n_sequences, seq_len], train split
    layers: list[LayerStats]
    label: str
    _model: object = field(default=None, repr=False)
    _grads: list | None = field(default=None, repr=False)
    derived: dict = field(default_factory=dict, repr=False)   # statistics other modules compute once from these ids

    def gradients(self, cancel=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """∇ w.r.t. (the parameter holding the query rows, the one holding the key rows), per linear layer, of
        Σ over calibration sequences of each sequence's mean next-token loss (every sequence weighs the same).
        Whole parameters: slice them with the layer's ChannelGroup.blocks (a fused q|k|v is the same twice)."""
        if self._grads is None:
            self._grads = _qk_gradients(self._model, self.input_ids, cancel)
        return self._grads

    def held_bytes(self) -> int:
        """What this calibration holds: its ids and every layer's kept statistics (the q/k activations above all)."""
        tensors = [self.input_ids] + [t for stats in self.layers for t in vars(stats).values()]
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))

    def drrqr_matrix(self, layer: int, head: int, seed: int = 0) -> torch.Tensor:
        """[min(2N, 5000), dk]: query and key activation rows of one head, stacked then subsampled."""
        stats = self.layers[layer]
        M = torch.cat([stats.q_acts[:, head], stats.k_acts[:, head]]).double()
        if M.shape[0] > DRRQR_ROWS:
            idx = torch.randperm(M.shape[0], generator=torch.Generator().manual_seed(seed + 7919 * layer + head))
            M = M[idx[:DRRQR_ROWS]]
        return M


def _check_enough(model, attns, input_ids: torch.Tensor) -> None:
    """Fewer activation rows than key channels leave PCA/DRRQR/Wanda statistics rank-deficient: refuse them;
    and the kept activations and the gradient pass must fit in memory."""
    n, t = input_ids.shape
    dk = max(layer.key_dim for layer in linear_layers(model))
    if n * t < dk:
        raise AnalysisError(f"Calibration with {n}×{t} = {n * t} tokens gives fewer activation rows than the key dim "
                            f"{dk}, so channel statistics would be rank-deficient; use at least {dk} tokens in all.")
    limits.check_calibration(model, n, t)


def check_size(model, n_sequences: int, seq_len: int) -> None:
    """The memory a calibration of this size needs, checked before anything is drawn (a recall model's
    sequences have its task's length, whatever seq_len says)."""
    task = inputs.recall_task(model)
    limits.check_calibration(model, n_sequences, task.seq_len if task is not None else seq_len)


def calibrate(model, tokenizer, n_sequences: int = 16, seq_len: int = 256, seed: int = 0,
              input_ids: torch.Tensor | None = None, label: str | None = None, cancel=None) -> Calibration:
    """Collect statistics on `n_sequences` random train-split windows (a recall model: recall sequences of
    the seed; see analysis.data.inputs.calibration_batch), or on the given ids described by `label`.
    cancel: checked before every batch (analysis.runtime.cancel)."""
    if input_ids is None:
        if n_sequences < 1 or seq_len < 2:
            raise AnalysisError("Calibration needs at least one sequence of at least two tokens.")
        check_size(model, n_sequences, seq_len)  # before the batch is drawn: its ids alone may not fit
        batch = inputs.calibration_batch(model, tokenizer, n_sequences, seq_len, seed)
        input_ids, label = batch.ids, batch.label
    attns = attention_layers(model)
    _check_enough(model, attns, input_ids)
    sq = [0.0] * len(attns)
    q_parts = [[] for _ in attns]
    k_parts = [[] for _ in attns]
    cov = [None] * len(attns)
    calling = {"layer": 0}

    def pre_hook(index):
        def hook(_module, args, kwargs):
            calling["layer"] = index
            x = (args[0] if args else kwargs["hidden_states"]).detach().float()
            sq[index] = sq[index] + x.square().sum(dim=(0, 1))
        return hook

    def observe(r):
        i = calling["layer"]
        q_parts[i].append(r.q_raw.float().flatten(0, 1).cpu())
        k_parts[i].append(r.k_raw.float().flatten(0, 1).cpu())
        k = r.k[:, :, :: r.k.shape[2] // r.k_raw.shape[2]].flatten(0, 1).double().cpu()  # undo GVA repeat
        s1, s2 = k.sum(0), torch.einsum("nhi,nhj->hij", k, k)
        cov[i] = (s1, s2, k.shape[0]) if cov[i] is None else (cov[i][0] + s1, cov[i][1] + s2, cov[i][2] + k.shape[0])

    hooks = [a.register_forward_pre_hook(pre_hook(i), with_kwargs=True) for i, a in enumerate(attns)]
    try:
        with torch.no_grad(), observe_recurrences(observe):
            held = limits.calibration_kept_bytes(model, *input_ids.shape)
            per = limits.fitting_batch(model, 8, input_ids.shape[1], reserve=held)
            run_batches(model, list(input_ids.split(per)), cancel=cancel)
    finally:
        for h in hooks:
            h.remove()
    n_tokens = input_ids.numel()
    layers = []
    for i in range(len(attns)):
        s1, s2, n = cov[i]
        mean = s1 / n
        layers.append(LayerStats(input_rms=(sq[i] / n_tokens).sqrt().cpu(), q_acts=torch.cat(q_parts[i]),
                                 k_acts=torch.cat(k_parts[i]), key_mean=mean.float(),
                                 key_cov=((s2 - n * torch.einsum("hi,hj->hij", mean, mean)) / max(1, n - 1)).float()))
    label = label or f"{input_ids.shape[0]}×{input_ids.shape[1]} tokens given by the caller"
    return Calibration(input_ids=input_ids, layers=layers, label=label, _model=model)


def sequences_only(model, tokenizer, n_sequences: int = 16, seq_len: int = 256, seed: int = 0) -> Calibration:
    """The calibration sequences `calibrate` would draw, without its forward pass and the channel statistics it
    keeps: what the head strategies read (their ids; each computes its own statistics from them, within the
    memory budget). No channel strategy may be given it (its `layers` are empty)."""
    if n_sequences < 1 or seq_len < 2:
        raise AnalysisError("Calibration needs at least one sequence of at least two tokens.")
    batch = inputs.calibration_batch(model, tokenizer, n_sequences, seq_len, seed)
    return Calibration(input_ids=batch.ids, layers=[], label=batch.label, _model=model)


def _qk_gradients(model, input_ids: torch.Tensor, cancel=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Gradients for q/k projections only, on a private copy (the shared model is never touched); a streamed model
    one layer at a time (analysis.models.stream.gradients), with the same sums."""
    if is_streamed(model):
        names = {id(m): n for n, m in model.named_modules()}
        wanted = [f"{names[id(layer.module)]}.{rows.param}" for layer, q, k in qk_rows(model) for rows in (q, k)]
        held = limits.calibration_kept_bytes(model, *input_ids.shape)
        per = limits.fitting_batch(model, 4, input_ids.shape[1], gradients=True, reserve=held)
        grads = model.parameter_gradients(list(input_ids.split(per)), wanted, cancel)
        return [(grads[wanted[2 * i]], grads[wanted[2 * i + 1]]) for i in range(len(wanted) // 2)]
    work = copy.deepcopy(model).float()
    work.requires_grad_(False)
    params = []
    for layer, q, k in qk_rows(work):
        for rows in (q, k):
            weight = layer.module.get_parameter(rows.param)
            weight.requires_grad_(True)
            params.append(weight)
    device = next(work.parameters()).device
    for seq in input_ids.split(4):
        check(cancel)
        seq = seq.to(device)
        # The loss is a mean over the batch's equal-length sequences: × batch size gives Σ of per-sequence
        # losses, so every sequence weighs the same whatever the split (a short last batch included).
        (work(seq, labels=seq, use_cache=False).loss * seq.shape[0]).backward()
    grads = [p.grad.detach().cpu() for p in params]
    del work
    return [(grads[2 * i], grads[2 * i + 1]) for i in range(len(grads) // 2)]
