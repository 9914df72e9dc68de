"""The Model page's block list: every block in order, linear-attention layers with their state, softmax
attention (hybrids) with its KV cache instead. No streamlit here."""
from __future__ import annotations

import pandas as pd

KV_TOKENS = 2048  # the context at which a softmax block's KV cache is shown next to its per-token growth


def blocks_frame(info) -> pd.DataFrame:
    rows = []
    for b in info.blocks:
        if b.kind == "linear":
            memory = f"state {b.state_bytes_per_sequence:,} B (fp32, fixed)"
            shape = f"{b.key_heads} key / {b.value_heads} value heads, dk {b.head_k_dim}, dv {b.head_v_dim}"
            mixer, plus, rest = (b.label or "linear attention").partition(" + ")   # "(layer i)" names the mixer
            name = f"{mixer} (layer {b.linear_layer}){plus}{rest}"
        elif b.kind == "softmax":
            per_token = b.kv_cache_bytes_per_token
            cache = "latent cache" if b.cache_note else "KV cache"  # MLA caches a latent, not per-head K and V
            memory = (f"no state; {cache} {per_token:,} B per token ({per_token * KV_TOKENS / 2**20:.2f} MiB at "
                      f"{KV_TOKENS:,} tokens, {info.dtype})")
            shape, name = b.cache_note or "not pruned", b.label or "softmax attention"
        else:
            memory, shape, name = "", "not analysed", b.label or "other mixer"
        rows.append({"Block": b.block, "Kind": name, "Heads and dims": shape, "Memory per sequence": memory})
    return pd.DataFrame(rows).set_index("Block")


def hybrid_note(info) -> str | None:
    """For a hybrid, which block each analysed layer is and which blocks are softmax attention; None otherwise."""
    softmax = [b.block for b in info.blocks if b.kind == "softmax"]
    if not softmax:
        return None
    where = ", ".join(f"{b.linear_layer}→{b.block}" for b in info.blocks if b.kind == "linear")
    return (f"Hybrid model: layers here count the {info.layers} linear-attention layers (layer→block: {where}); "
            f"block{'s' if len(softmax) > 1 else ''} {', '.join(map(str, softmax))} "
            "are softmax attention, with no recurrent state (their KV cache is on the Model page).")


def head_meaning(info, kind: str) -> str | None:
    """What "head" counts on a page where value heads and key heads differ (None where they are the same):
    kind "value" (a state per value head: States, State lab) or "key" (channels pruned per key head)."""
    if info.value_heads == info.heads or info.heads <= 0:
        return None
    group = info.value_heads // info.heads
    if kind == "value":
        return (f"“Head” here is a value head (0–{info.value_heads - 1}): each keeps its own state; every {group} "
                f"value heads share one of the {info.heads} key heads (key head = value head // {group}).")
    return (f"“Head” here is a key head (0–{info.heads - 1}): key channels are scored and pruned per key head; key "
            f"head h is read by value heads {group}h to {group}h + {group - 1} (the States page counts value heads).")


def layer_name(info, layer: int) -> str:
    """"layer 3" — and in a hybrid, whose layers count only the linear-attention blocks, "layer 3 (block 4)"."""
    if len(info.blocks) == info.layers:
        return f"layer {layer}"
    block = next((b.block for b in info.blocks if b.linear_layer == layer), None)
    return f"layer {layer}" if block is None else f"layer {layer} (block {block})"
