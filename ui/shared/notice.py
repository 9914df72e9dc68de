"""One plain "Notice:" line under a chart, computed from the numbers it shows (pure: no streamlit).

Each sentence states what the data on screen says (its range, where it jumps, how it compares with the
random-init copy); the one causal remark (a decay that wipes the state leaves one outer product) is worded
as where to look, and the State lab shows that decay for the head.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from analysis.linalg.rank_card import HEADLINE, HEADLINE_NAME
from analysis.shrink.allocate import charged
from analysis.shrink.number_format import signed

SAME = 0.1  # trained and random-init means within 10 % of each other read "the same"


def _where(values: np.ndarray, pick) -> tuple[float, int, int]:
    layer, head = np.unravel_index(pick(values), values.shape)
    return float(values[layer, head]), int(layer), int(head)


def rank_map(metric: str, label: str, final, max_rank: int, final_random=None, headline=None) -> str:
    """Under the layer × head map: its range, what the rank utilization is (and is not), and training's effect.
    `headline`: the [L, H] effective rank of the same states, the one count of directions used (analysis.linalg.rank_card)."""
    z = np.asarray(final, dtype=float)
    if not np.isfinite(z).any():
        return "Notice: no head has a finite value here (zero or non-finite states)."
    z = np.where(np.isfinite(z), z, np.nan)
    (lo, ll, lh), (hi, hl, hh) = _where(z, np.nanargmin), _where(z, np.nanargmax)
    mean = float(np.nanmean(z))
    line = (f"Notice: {label} runs from {lo:.3g} (layer {ll}, head {lh}) to {hi:.3g} (layer {hl}, head {hh}), "
            f"mean {mean:.3g}")
    if metric == "rank_utilization":
        if mean <= 1.25 / max_rank:
            line += (f", about 1/m = {1 / max_rank:.3g}: a stable rank near 1, so one direction holds almost all of "
                     "each state's energy (a decay that wipes the state every token leaves only the last write "
                     "β k vᵀ; the State lab shows a head's decay)")
        else:
            line += (f", i.e. a stable rank u · m of about {mean * max_rank:.1f} (m = {max_rank}): the energy measured "
                     "against the strongest direction, not a count of directions")
    if headline is not None and metric != HEADLINE:
        h = np.asarray(headline, dtype=float)
        if np.isfinite(h).any():
            line += (f"; the {HEADLINE_NAME} of the same states, the count of directions used, averages "
                     f"{float(np.nanmean(np.where(np.isfinite(h), h, np.nan))):.3g} (a head's rank card lists every measure)")
    if final_random is not None:
        r = np.asarray(final_random, dtype=float)
        if np.isfinite(r).any():
            rmean = float(np.nanmean(np.where(np.isfinite(r), r, np.nan)))
            if abs(mean - rmean) <= SAME * max(abs(mean), abs(rmean)):
                line += f"; the random-init copy is the same ({rmean:.3g}), so training did not change it"
            else:
                line += f"; random init {rmean:.3g}, so training {'lowered' if mean < rmean else 'raised'} it"
    return line + "."


def over_positions(positions: Sequence[int], mean, tokens: Sequence[str] | None = None) -> str:
    """Under a metric over token positions: where it starts and ends, and the token of its largest rise."""
    y = np.asarray(mean, dtype=float)
    ok = np.flatnonzero(np.isfinite(y))
    if ok.size == 0:
        return "Notice: no finite value at any position."
    first, last = ok[0], ok[-1]
    line = (f"Notice: the mean goes from {y[first]:.3g} after token {positions[first]} to {y[last]:.3g} after "
            f"token {positions[last]}")
    steps = np.diff(y)
    if steps.size and np.isfinite(steps).any() and np.nanmax(steps) > 0:
        i = int(np.nanargmax(steps)) + 1
        word = f" (“{tokens[i].strip() or repr(tokens[i])}”)" if tokens is not None else ""
        line += f"; its largest rise is at token {positions[i]}{word}"
    return line + "."


def spectrum(curves: dict[str, Sequence[float]], headline: float | None = None) -> str:
    """Under a singular spectrum: at the last picked position, s₁/s₂ and how many values exceed s₁/10, beside the
    headline count of directions used (`headline`: the effective rank there, mean over sequences)."""
    if not curves:
        return ""
    name, s = list(curves.items())[-1]
    s = np.asarray(s, dtype=float)
    s = s[np.isfinite(s)]
    if s.size == 0 or s[0] <= 0:
        return f"Notice: the state {name} is zero."
    big = int((s > s[0] / 10).sum())
    ratio = f"s₁ is {s[0] / s[1]:.3g}× s₂ and " if s.size > 1 and s[1] > 0 else ""
    line = f"Notice: {name}, {ratio}{big} of {s.size} singular values exceed s₁/10 (directions within 10× of the strongest)"
    if headline is not None and math.isfinite(headline):
        line += f"; the {HEADLINE_NAME}, the count of directions used, is {headline:.3g}"
    return line + "."


def noise_plot(snr_db: Sequence[float], probes: list[dict]) -> str:
    """Under the retrieval error vs SNR: the exact raw-query error falls 10× per 20 dB (it is ∝ σ)."""
    if not probes or len(snr_db) < 2:
        return ""
    y = [v for v in probes[0]["predicted_raw"]["median"]]
    if y[0] is None or y[-1] is None or not (math.isfinite(y[0]) and math.isfinite(y[-1])):
        return ""
    return (f"Notice: {probes[0]['name']}'s exact raw-query error goes from {y[0]:.3g} at {snr_db[0]:g} dB to "
            f"{y[-1]:.3g} at {snr_db[-1]:g} dB, 10× less per 20 dB because it is proportional to σ; a direction "
            "with a smaller sⱼ (larger Σs²/sⱼ² in the table) sits higher.")


def kept_masks(masks: dict[str, Sequence[int]]) -> str:
    """Under the kept-channel masks of one head: how many kept channels every strategy shares."""
    if not masks:
        return ""
    m = np.asarray(list(masks.values()), dtype=bool)           # [strategies, dk]
    kept = int(m[0].sum())
    every, some = int(m.all(0).sum()), int(m.any(0).sum())
    return (f"Notice: of the {kept} channels each strategy keeps, {every} are kept by all {len(masks)}; "
            f"{some} of the {m.shape[1]} channels are kept by at least one.")


def agreement(labels: Sequence[str], matrix, kept: int, dk: int, where: str = "") -> str:
    """Under the Jaccard matrix: the most and least similar pair, next to what two random choices would give."""
    pairs = [(float(matrix[i][j]), labels[i], labels[j]) for i in range(len(labels)) for j in range(i + 1, len(labels))]
    if not pairs:
        return ""
    (lo, a, b), (hi, c, d) = min(pairs), max(pairs)
    chance = kept / (2 * dk - kept) if 0 < kept < 2 * dk else float("nan")
    return (f"Notice: {c} and {d} agree most (J = {hi:.2f}), {a} and {b} least (J = {lo:.2f}); two random choices "
            f"of {kept} of {dk} channels{where} would overlap by about k/(2d − k) = {chance:.2f}.")


def kept_energy(energy: dict[str, Sequence[float]], which: str) -> str:
    """Under the kept-energy bars: which strategy keeps the most and the least of the activations, mean over layers."""
    means = {name: float(np.mean(v)) for name, v in energy.items() if len(v)}
    if not means:
        return ""
    best, worst = max(means, key=means.get), min(means, key=means.get)
    return (f"Notice: {best} keeps the most {which} energy ({means[best]:.1%} mean over layers), {worst} the least "
            f"({means[worst]:.1%}).")


def top_channels(scores: dict[str, Sequence[float]]) -> str:
    """Under the score bars (axis-aligned strategies): each one's top-scored channel, to compare at a glance."""
    tops = {name: int(np.nanargmax(np.asarray(v, dtype=float))) for name, v in scores.items() if len(v)}
    if not tops:
        return ""
    shared = len(set(tops.values())) == 1
    listed = ", ".join(f"{name}: {c}" for name, c in tops.items())
    return f"Notice: the top-scored channel is {listed}" + (" — the same channel for all." if shared and len(tops) > 1
                                                          else ".")


def sweep(points: Sequence[dict], labels: dict[str, str]) -> str:
    """Under the sweep: at the largest ratio measured, the strategy that lost least and the one that lost most."""
    pruned = [p for p in points if p.get("strategy") != "unpruned" and p.get("delta_vs_unpruned") is not None]
    if not pruned:
        return ""
    top = max(p["ratio"] for p in pruned)
    at = sorted((p for p in pruned if p["ratio"] == top), key=lambda p: p["delta_vs_unpruned"])
    best, worst = at[0], at[-1]
    name = lambda p: labels.get(p["strategy"], p["strategy"])  # noqa: E731
    if best is worst:
        return f"Notice: at ρ = {top:g}, {name(best)} changes perplexity by {best['delta_vs_unpruned']:+.1%}."
    return (f"Notice: at ρ = {top:g} (the largest measured), {name(best)} loses least "
            f"({best['delta_vs_unpruned']:+.1%}) and {name(worst)} most ({worst['delta_vs_unpruned']:+.1%}); one "
            "text sample, so differences of a few tenths of a percent need not carry over to other text.")


STEP_CLEAR = 0.5  # times "step" when every change inside a tile is under half the smallest jump across a boundary


def time_shape(rows: Sequence[dict], tile_rows: int = 64) -> str:
    """"steps" where the measured times jump at tile boundaries and stay flat inside a tile, "proportional" where
    time over dk stays within a factor 1.5 of constant, "other" otherwise (rows: key_dim, median_ms; sorted)."""
    tiles: dict[int, list[float]] = {}
    for r in rows:
        tiles.setdefault(-(-int(r["key_dim"]) // tile_rows), []).append(float(r["median_ms"]))
    if len(tiles) >= 2:
        groups = [tiles[t] for t in sorted(tiles)]
        inside = max((max(g) / min(g) - 1 for g in groups if len(g) > 1), default=0.0)
        jumps = [float(np.mean(b)) / float(np.mean(a)) - 1 for a, b in zip(groups, groups[1:])]
        if min(jumps) > 0 and inside < STEP_CLEAR * min(jumps):
            return "steps"
    per_dk = [float(r["median_ms"]) / int(r["key_dim"]) for r in rows]
    return "proportional" if max(per_dk) / min(per_dk) <= 1.5 else "other"


def latency(points: Sequence[dict], tile_rows: int = 64) -> str:
    """Under the kernel time vs key dim: the smallest against the largest key dim timed, and whether the times
    move in steps at the tile boundaries, in proportion to dk, or neither, as measured."""
    rows = sorted((p for p in points if p.get("median_ms")), key=lambda p: p["key_dim"])
    if len(rows) < 2:
        return ""
    small, large = rows[0], rows[-1]
    ratio = large["median_ms"] / small["median_ms"]
    line = (f"Notice: dk {small['key_dim']} takes {small['median_ms']:.3g} ms and dk {large['key_dim']} "
            f"{large['median_ms']:.3g} ms ({ratio:.2f}× the time for {large['key_dim'] / small['key_dim']:.3g}× dk)")
    shape = time_shape(rows, tile_rows)
    if shape == "steps":
        line += (f"; the times stay nearly flat inside a {tile_rows}-row tile and jump at the dotted boundaries, so a "
                 "pruned dk saves time only when it removes a whole tile")
    elif shape == "proportional":
        line += "; the times rise roughly in proportion to dk, with no jump at the dotted tile boundaries"
    else:
        line += "; the times follow neither dk in proportion nor a jump at each dotted tile boundary"
    return line + "."


def sensitivity(ratios: Sequence[float], losses, ses=None, names: Sequence[str] | None = None) -> str:
    """Under the map: at the largest ratio with every layer measured, the most and least sensitive layer by what the
    allocator charges (analysis.shrink.allocate.charged: clamped at 0, never falling as ρ grows), the layers whose
    measured gain was clamped, and whether the gap exceeds twice the standard error of the difference. names: the
    layers as the ratio inputs name them (default "layer i")."""
    from analysis.shrink.number_format import signed
    names = list(names) if names is not None else [f"layer {i}" for i in range(len(losses))]
    for j in reversed(range(len(ratios))):
        column = [row[j] for row in losses]
        if column and all(v is not None for v in column):
            break
    else:
        return ""
    charges = [charged(ratios, row, None if not ses else ses[i])[j] for i, row in enumerate(losses)]
    cost = [c for c, _ in charges]
    worst, best = int(np.argmax(cost)), int(np.argmin(cost))
    line = (f"Notice: at ρ = {ratios[j]:g}, {names[worst]} is the most sensitive (the allocator charges "
            f"{signed(cost[worst])}) and {names[best]} the least ({signed(cost[best])})")
    clamped = [i for i, (v, (_, source)) in enumerate(zip(column, charges)) if v < 0 and source is None]
    if clamped:
        listed = ", ".join(f"{names[i]} {column[i]:+.2g}" for i in clamped)
        line += (f"; measured gains ({listed}) are charged as 0: a one-layer gain is noise, and the fitted map "
                 "(0 at ρ = 0, never falling) puts it at 0")
    lifted = [i for i, (_, source) in enumerate(charges) if source is not None and source != j]
    if lifted:
        line += (f"; {', '.join(names[i] for i in lifted)} measured out of order with a neighbouring ρ, and "
                 "the fitted map pools {} with it (pruning more never predicts less)".format(
                     "it" if len(lifted) == 1 else "them"))
    if ses:
        def se_of(layer):  # the standard error of the measurement the charge comes from (the clamp: this ratio's)
            source = charges[layer][1]
            return ses[layer][j if source is None else source]
        a, b = se_of(worst), se_of(best)
        if a is not None and b is not None:
            noise = 2 * math.hypot(a, b)
            line += (f"; the gap is larger than twice the standard error of the difference ({noise:.4f}), so the "
                     "allocator has a real choice" if cost[worst] - cost[best] > noise else
                     f"; the gap is within twice the standard error of the difference ({noise:.4f}), so these "
                     "layers cannot be told apart on this text and the allocator's choice between them is noise")
    return line + "."


def key_dims(head_k_dims: Sequence[int], tile_rows: int) -> str:
    """Under the key-dim bars: the tiles each layer's dk fills, and the fewest channels whose removal frees a tile."""
    dks = [int(d) for d in head_k_dims]
    if not dks or min(dks) <= 0:
        return ""
    tiles = [-(-d // tile_rows) for d in dks]
    if len(set(dks)) == 1:
        line = f"Notice: every layer has dk = {dks[0]} per head, {tiles[0]} tile{'s' if tiles[0] != 1 else ''} of " \
               f"{tile_rows} rows"
    else:
        lo, hi = int(np.argmin(dks)), int(np.argmax(dks))
        line = (f"Notice: dk per head runs from {dks[lo]} (layer {lo}) to {dks[hi]} (layer {hi}), "
                f"{sum(tiles)} tiles of {tile_rows} rows per head over all {len(dks)} layers")
    partial = [i for i, d in enumerate(dks) if d % tile_rows]
    if partial:
        line += (f"; {len(partial)} of {len(dks)} layers leave their last tile partly empty (dk not a multiple of "
                 f"{tile_rows}), and the kernel still works on the whole tile")
    # the rows in a layer's last tile: removing that many channels per head frees one tile
    last = {i: d - tile_rows * (t - 1) for i, (d, t) in enumerate(zip(dks, tiles)) if t > 1}
    if last:
        cheapest = min(last, key=last.get)
        line += (f"; the fewest channels to remove to free a tile: {last[cheapest]} per head in layer {cheapest} "
                 f"(ρ = {last[cheapest] / dks[cheapest]:.3g})")
    else:
        line += "; every layer holds one tile, so pruning dk cannot free a tile here"
    return line + "."


def recovery(history: Sequence[dict], validation: Sequence[dict], change: dict | None = None) -> str:
    """Under the recovery curve: validation perplexity at step 0 against the best check (the step kept), whether
    that change exceeds twice its paired standard error over the validation windows (`change`: the recovery's
    validation_change), and whether the training loss moved beyond its own step-to-step noise."""
    checks = [v for v in validation if v.get("perplexity") is not None and math.isfinite(v["perplexity"])]
    if not checks:
        return ""
    start, best = checks[0], min(checks, key=lambda v: v["perplexity"])
    if best["perplexity"] < start["perplexity"]:
        change_pct = best["perplexity"] / start["perplexity"] - 1
        line = (f"Notice: validation perplexity fell from {start['perplexity']:.4g} at step {start['step']} to "
                f"{best['perplexity']:.4g} at step {best['step']} ({change_pct:+.2%}); recovery keeps step "
                f"{best['step']}'s weights")
        if change and change.get("se") is not None and math.isfinite(change["se"]):
            delta, noise = change["delta_log_ppl"], 2 * change["se"]
            line += (f", {'within' if abs(delta) < noise else 'beyond'} noise (Δ log perplexity {signed(delta)} "
                     f"nats/token, 2 SE = {noise:.4f} over {change['windows']} paired validation windows)")
    else:
        line = (f"Notice: no validation check improved on step {start['step']}'s perplexity "
                f"{start['perplexity']:.4g}, so the pruned model's own weights are kept")
    loss = np.asarray([e["loss"] for e in history if e.get("loss") is not None], dtype=float)
    loss = loss[np.isfinite(loss)]
    window = loss.size // 4
    if window >= 2:
        # the loss's step-to-step noise (successive differences of independent noise have √2 × its sd) sets
        # the standard error of the difference between the first and the last quarter's means
        head, tail = loss[:window].mean(), loss[-window:].mean()
        noise = float(np.std(np.diff(loss), ddof=1)) / math.sqrt(2)
        se = noise * math.sqrt(2 / window)
        moved = head - tail
        if abs(moved) > 2 * se:
            line += (f"; the training loss {'fell' if moved > 0 else 'rose'} from {head:.4g} (mean of the first "
                     f"{window} steps) to {tail:.4g} (last {window}), beyond its step-to-step noise (± {noise:.2g})")
        else:
            line += (f"; the training loss is flat within its step-to-step noise (first {window} steps {head:.4g}, "
                     f"last {window} {tail:.4g}, noise ± {noise:.2g})")
    return line + "."
