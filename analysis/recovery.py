"""Short recovery fine-tune after a prune: only the parameters holding the pruned q/k rows learn (the adapter's
`channel_rows`: projections and short convolutions; a fused q|k|v projection learns as a whole)."""
from __future__ import annotations

import copy
import math

import torch

from analysis import data, limits, workload
from analysis.cancel import check
from analysis.errors import AnalysisError
from analysis.archs import adapter_for
from analysis.models import attention_layers


def recover(model, tokenizer, steps: int = 100, lr: float = 1e-3, batch: int = 8, seq_len: int = 256,
            seed: int = 0, progress=None, cancel=None, yes: bool = False, say=None):
    """A fine-tuned COPY of `model` (AdamW, cosine to 10%, clip 1.0) on train-split windows; `cancel` is
    checked before every step (analysis.cancel); more than an hour of steps here is refused unless `yes`
    (analysis.workload)."""
    if steps < 1:
        raise AnalysisError(f"Recovery needs at least one step, got {steps}.")
    limits.check_recovery(model, batch, seq_len)
    workload.check("Recovery fine-tuning", steps, model, batch, seq_len, "use fewer recovery steps", yes, say,
                   per_forward=workload.TRAIN_STEP)
    work = copy.deepcopy(model).float().train()
    work.requires_grad_(False)
    params = []
    adapter = adapter_for(work)
    for attn in attention_layers(work):
        for rows in adapter.channel_rows(attn):
            p = attn.get_parameter(rows.param)
            if not any(p is seen for seen in params):
                p.requires_grad_(True)
                params.append(p)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    train_ids = data.encode(data.load_text("train"), tokenizer)
    gen = torch.Generator().manual_seed(seed)
    device = next(work.parameters()).device
    losses = []
    for step in range(steps):
        check(cancel)
        for group in optimizer.param_groups:
            group["lr"] = lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        starts = torch.randint(0, len(train_ids) - seq_len, (batch,), generator=gen).tolist()
        ids = torch.stack([train_ids[s:s + seq_len] for s in starts]).to(device)
        loss = work(ids, labels=ids, use_cache=False).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(loss.item())
        if progress:
            progress(step + 1, steps, loss.item())
    work.requires_grad_(False)
    param = next(model.parameters())
    return work.eval().to(param.dtype), losses
