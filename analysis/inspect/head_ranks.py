"""State-rank stratification: each head's effective rank over token positions, the low-/high-rank split of every
layer's heads, and how stable that split is across inputs (Sun et al., "State Rank Dynamics in Linear Attention
LLMs", arXiv 2602.02195, report one group of heads whose rank stays near zero and one that climbs to its bound, the
same heads on every input).

Per value head (the heads that hold a state) and position t: the Roy–Vetterli effective rank erank(S_t) (the
project's rank metric; the paper counts singular values above a threshold, which the JSON gives beside it as the
numerical rank at τ = 1e-3) and ‖S_t‖_F, mean over the sequences. A head's summary is the mean of
log max(erank, 1) over the positions in the second half of the sequence (the first tokens fill every state alike).

The split rule, per layer: sort the heads' summaries and cut at the largest gap between neighbours; heads below
the cut are "low", above "high". Why the largest gap: the reported bifurcation is two groups far apart on a log
scale, and the widest gap is where such groups part, with no number of groups, threshold or iteration to choose
(2-means in one dimension finds the same cut when the groups are well apart). Its strength is said with it:
`gap` (nats of log erank) and `gap_ratio`, the largest gap over the second largest (None with two heads): a
ratio near 1 means the heads spread evenly and the cut is arbitrary. A split is called clear when on every text
the gap is at least log 1.5 (the groups' effective ranks differ by a factor 1.5 or more at the cut); the notice
says "weak" otherwise.

Stability across texts: the split computed on each text, then per layer the fraction of heads whose label is the
same on every text, and Cohen's κ = (p_o − p_e)/(1 − p_e) averaged over every pair of texts (p_o: labels equal,
p_e: agreement expected from each text's label frequencies; κ = 1 when both label sets are identical and
constant).
"""
from __future__ import annotations

import math
from itertools import combinations

import torch

from analysis.data import corpus as data
from analysis.inspect.states import METRIC_BATCH, collect_states
from analysis.models.load import linear_layers
from analysis.models import limits
from analysis.runtime.allocator import trim

MAX_POSITIONS = 64   # trajectory points per head (a stride keeps the SVD count bounded for long texts)
CLEAR_GAP = math.log(1.5)   # a split whose gap is at least this on every text is "clear"


def trajectory_positions(tokens: int) -> list[int]:
    """Positions traced: every `stride`-th token so at most MAX_POSITIONS, and the last one."""
    stride = max(1, -(-tokens // MAX_POSITIONS))
    return sorted(set(range(stride - 1, tokens, stride)) | {tokens - 1})


TRAJECTORY_METRICS = ("effective_rank", "numerical_rank", "fro_norm")   # what head_trajectories reads of a trace


def head_trajectories(model, ids: torch.Tensor, progress=None, held: int = 0) -> dict:
    """Per linear layer [H, P] effective rank, numerical rank and ‖S‖_F (mean over the sequences) at the traced
    positions, plus each head's summary (mean log erank over the second half) and mean ‖S‖_F there.
    held: bytes the caller holds beside this work that the memory budget counts (a calibration's statistics)."""
    check_trajectories(model, *ids.shape, held=held)   # with what the process holds now (the encoded split)
    positions = trajectory_positions(ids.shape[1])
    per = trajectory_batch(model, *ids.shape, held=held)
    trace = collect_states(model, ids, positions=positions, progress=progress, batch=per,
                           keep_metrics=TRAJECTORY_METRICS)
    late = torch.tensor([p >= ids.shape[1] / 2 for p in positions])
    if not late.any():
        late[-1] = True
    layers = []
    for layer in trace.layers:
        erank = layer.metrics["effective_rank"].double()                         # [B, H, P]
        log_erank = erank.clamp(min=1.0).log()
        fro = layer.metrics["fro_norm"].double()
        layers.append({"effective_rank": erank.nanmean(0), "numerical_rank": layer.metrics["numerical_rank"]
                       .double().nanmean(0), "fro_norm": fro.nanmean(0),
                       "summary": log_erank[..., late].nanmean((0, 2)),             # [H]
                       "late_log_fro": fro[..., late].clamp(min=1e-30).log().nanmean((0, 2))})
    del trace
    trim()   # the many small metric tensors leave free pages inside the heap: hand them back for what follows
    return {"positions": positions, "layers": layers}


def trajectory_bytes(model, sequences: int, tokens: int, per: int, held: int = 0) -> int:
    """What head_trajectories holds with `per` sequences per forward (streamed: one block at a time):

    - held beside it: the caller's (`held`), the train split's ids the process keeps encoded (data.held_bytes),
      the sequences' ids and, streamed, every sequence's hidden states between two blocks (input and output; none
      where the runner spills them to a file: analysis.models.stream.model.run);
    - the traced metrics of every layer and sequence (TRAJECTORY_METRICS);
    - one forward of `per` sequences with the states of one chunk's traced positions (limits.forward_bytes);
    - per sequence, what one chunk's hand-over forms (delta_rule.states_at: the decayed keys [P, dk, C] and the
      states [P, dk, dv]) and the states pending their metrics (as many again);
    - the metrics of at most METRIC_BATCH states (states._LayerCollector._flush): two float64 matrices each (its
      copy and its Gram, then the Gram and the eigensolver's copy of it)."""
    layers = linear_layers(model)
    positions = trajectory_positions(tokens)
    in_chunk = max(sum(1 for p in positions if start <= p < start + limits.CHUNK)
                   for start in range(0, tokens, limits.CHUNK))
    chunk = min(tokens, limits.CHUNK)
    hidden = int(model.config.hidden_size)
    kept = held + data.held_bytes() + sequences * tokens * 8 \
        + sequences * len(positions) * sum(layer.value_heads for layer in layers) * len(TRAJECTORY_METRICS) * 4
    if limits.streamed(model):   # every sequence's hidden states, unless the runner spills them to disk
        between = sequences * tokens * hidden * 4
        spare = model.limit - model.largest_unit_bytes - limits.block_work_bytes(model, per, tokens)
        kept += 2 * between if between <= spare else 0
    formed = max(layer.value_heads * in_chunk * (chunk * layer.key_dim + 2 * layer.key_dim * layer.value_dim) * 4
                 for layer in layers)
    metrics = max(min(METRIC_BATCH, per * layer.value_heads * len(positions)) * 8 * 2
                  * max(layer.key_dim * layer.value_dim, min(layer.key_dim, layer.value_dim) ** 2) for layer in layers)
    return kept + limits.forward_bytes(model, per, tokens, states=in_chunk) + per * formed + metrics


def trajectory_batch(model, sequences: int, tokens: int, held: int = 0) -> int:
    """Sequences per forward of head_trajectories: all of them in memory; streamed, as many as the budget holds
    (trajectory_bytes), at least one (check_trajectories refuses what one does not fit)."""
    if not limits.streamed(model):
        return sequences
    limit, _ = limits.allowed(next(model.parameters()).device)
    per = sequences
    while per > 1 and limit is not None and trajectory_bytes(model, sequences, tokens, per, held) > limit:
        per //= 2
    return per


def check_trajectories(model, sequences: int, tokens: int, held: int = 0) -> None:
    """One sentence, before any work, when the head statistics of `sequences` × `tokens` do not fit the memory this
    request may hold (a streamed model: even one sequence per forward)."""
    per = trajectory_batch(model, sequences, tokens, held)
    how = "one block at a time, " if limits.streamed(model) else ""
    limits.require(trajectory_bytes(model, sequences, tokens, per, held),
                   f"Scoring the heads by their states on {sequences:,} × {tokens:,} calibration tokens ({how}"
                   f"{per} sequence{'s' if per != 1 else ''} per forward, every layer's states at "
                   f"{len(trajectory_positions(tokens))} positions)",
                   "use fewer calibration sequences or tokens (--calib-sequences, --calib-tokens) or raise "
                   "--max-memory", next(model.parameters()).device)


def split_groups(summary: torch.Tensor) -> dict:
    """The largest-gap split of one layer's head summaries: labels ("low"/"high" per head), the cut, its gap and
    gap ratio; one head: no split (label "single")."""
    values = [float(v) for v in summary]
    if len(values) < 2:
        return {"labels": ["single"] * len(values), "cut": None, "gap": None, "gap_ratio": None}
    order = sorted(values)
    gaps = [b - a for a, b in zip(order, order[1:])]
    at = max(range(len(gaps)), key=lambda i: (gaps[i], -i))
    cut = (order[at] + order[at + 1]) / 2
    rest = sorted(gaps, reverse=True)[1:]
    ratio = (gaps[at] / rest[0] if rest[0] > 0 else math.inf) if rest else None
    return {"labels": ["high" if v > cut else "low" for v in values], "cut": cut, "gap": gaps[at],
            "gap_ratio": ratio}


def cohen_kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's κ of two label lists; 1.0 when they are identical, None when chance agreement is already total
    but they differ (cannot happen for two-group labels of the same heads)."""
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    labels = set(a) | set(b)
    expected = sum((a.count(c) / n) * (b.count(c) / n) for c in labels)
    if expected >= 1.0:
        return 1.0 if observed == 1.0 else None
    return (observed - expected) / (1 - expected)


def stability(labels: list[list[str]]) -> dict:
    """One layer's labels on several texts: the fraction of heads labelled alike on all texts, mean pairwise
    Cohen's κ, and each head's majority label."""
    heads = len(labels[0])
    same = [len({text[h] for text in labels}) == 1 for h in range(heads)]
    kappas = [k for x, y in combinations(labels, 2) if (k := cohen_kappa(x, y)) is not None]
    majority = [max(("low", "high", "single"), key=lambda c: sum(text[h] == c for text in labels))
                for h in range(heads)]
    return {"agreement": sum(same) / heads if heads else None,
            "kappa": sum(kappas) / len(kappas) if kappas else None, "same_on_all": same, "majority": majority}


def stratification(traces: list[dict]) -> list[dict]:
    """Per layer: every text's split and the split's stability (traces: head_trajectories of each text)."""
    out = []
    for index in range(len(traces[0]["layers"])):
        splits = [split_groups(t["layers"][index]["summary"]) for t in traces]
        out.append({"layer": index, "splits": splits, **stability([s["labels"] for s in splits])})
    return out


def notice(layers: list[dict], texts: int) -> list[str]:
    """One line per layer, computed from the numbers: how many heads are low- and high-rank on every text, how
    far apart the groups are (the gap as a factor in effective rank), and the split's stability."""
    lines = []
    for row in layers:
        heads = len(row["majority"])
        if heads < 2:
            lines.append(f"layer {row['layer']}: one head, no split")
            continue
        low_all = sum(all(s["labels"][h] == "low" for s in row["splits"]) for h in range(heads))
        high_all = sum(all(s["labels"][h] == "high" for s in row["splits"]) for h in range(heads))
        gaps = [s["gap"] for s in row["splits"]]
        kappa = "n/a" if row["kappa"] is None else f"{row['kappa']:.2f}"
        strength = "clear" if min(gaps) >= CLEAR_GAP else "weak"
        lines.append(f"layer {row['layer']}: {low_all} of {heads} heads low-rank and {high_all} high-rank on all "
                     f"{texts} texts; {strength} split (groups ×{math.exp(min(gaps)):.2f}–×{math.exp(max(gaps)):.2f} "
                     f"apart in effective rank); agreement {row['agreement']:.0%}, chance-corrected agreement a {kappa}")
    return lines
